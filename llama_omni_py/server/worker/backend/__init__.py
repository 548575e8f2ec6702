"""server/worker/backend"""
