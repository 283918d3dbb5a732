"""`lockscope top`, the live view: command.py (its options and the
command), session.py (the probe's window cut every --interval, each
interval named), screen.py (the frames drawn, interactive or --batch)."""
