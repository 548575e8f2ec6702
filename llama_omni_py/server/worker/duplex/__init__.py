"""``/ws/duplex``: the MiniCPM-o demo's full-duplex protocol (docs/server-protocol.md, "Full duplex").

Owns: protocol (the messages of full duplex on the wire, shared with /backend's full_duplex mode
and the Realtime API's full-duplex face), connection (one WebSocket). May import the worker's
root modules and the shared server pieces.
"""
