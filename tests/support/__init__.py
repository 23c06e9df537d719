"""Helpers shared by test packages: a broker subprocess and a raw-frame connection (`broker_process`)."""
