"""``/ws/half_duplex``: the MiniCPM-o demo's hands-free mode (docs/server-protocol.md, "Half duplex").

Owns: protocol (its messages), connection (one WebSocket over a HandsFreeSession). May import the
worker's root modules, backend/protocol's field readers and the shared server pieces.
"""
