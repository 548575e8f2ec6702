"""server/worker/duplex"""
