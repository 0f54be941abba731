"""Configuration: the settings (declared once; SET, SHOW and TRDB_<NAME>) and the cost model's unit costs."""
