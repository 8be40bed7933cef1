"""Run directories: metrics, transcripts, summaries."""
