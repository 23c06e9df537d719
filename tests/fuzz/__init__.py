"""Fuzz targets over the wire protocol, the broker's request path and the engine (`make fuzz`)."""
