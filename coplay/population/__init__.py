"""Population drivers: opponent pools, leagues, PSRO/JPSRO and their meta-games."""
