"""The model: transformer specifications, exact parameter and FLOP counts, presets, config.json
import."""
