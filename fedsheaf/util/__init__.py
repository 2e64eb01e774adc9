"""Utilities that know nothing of fedsheaf: errors, units, atomic writes, seeding,
timers, memory, host facts, strict YAML. Nothing here imports another fedsheaf layer."""
