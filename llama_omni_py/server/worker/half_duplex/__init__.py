"""server/worker/half_duplex"""
