"""``/v1/realtime``: the OpenAI Realtime API on a worker (docs/serving.md, "OpenAI Realtime API").

Owns: base (what both modes share: configuration from the query, errors as events, the event
loop), connection (hands-free turns with server VAD), full_duplex (``?mode=full_duplex``) and
response (one response's events). The event shapes and the table of served fields are the
server's shared realtime_events and realtime_fields. May import the worker's root modules,
duplex/protocol and the shared server pieces.
"""
