"""The main job: a real multi-stage pipeline on a broker (`kittiwake demo`)."""
