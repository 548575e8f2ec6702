"""modules/llm"""
