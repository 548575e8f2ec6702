"""server/worker"""
