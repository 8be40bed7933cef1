"""Ready run configs, one YAML file each (`coplay presets` lists them)."""
