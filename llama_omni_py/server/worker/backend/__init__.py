"""``/backend``: the MiniCPM-o demo backend protocol as a worker speaks it (docs/server-protocol.md).

Owns: protocol (message kinds, uplink parsing, downlink builders), connection (one WebSocket:
the state machine, reader, turn worker and single writer), full_duplex (the protocol's
full_duplex mode). May import the worker's root modules, the duplex protocol's messages
(duplex/protocol) and the shared server pieces.
"""
