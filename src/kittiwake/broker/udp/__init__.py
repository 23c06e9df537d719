"""UDP datagrams as a face of the broker (`--udp-port`, `kwu://`): CMQ's transport (001).

`face.UdpFace` plugs the listener (`listener`) into a broker; the
retransmit window (`retransmit_window`) makes a retransmitted write run once.
"""
