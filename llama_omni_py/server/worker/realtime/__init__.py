"""server/worker/realtime"""
