"""Configuration: the config's sections and their parsing (``sections``), the key
schema (``schema``), the paper's architectures (``presets``) and how many ranks a config
runs on (``ranks``)."""
