"""The LLM stage: model (LanguageModel: prefill, the reply in 10-token chunks with the hidden
states the TTS is conditioned on, teacher forcing), context (LlmContext, one libllama context
shared by an engine's slots, and its DecodeScheduler), prompt (MiniCPM-o's prompt layouts),
beam_search (transformers' beam search over the slot's sequences), text_stream (text from token
pieces, whole characters only).

prompt, beam_search and text_stream are pure Python; model and context load the core. May
import what modules/ may.
"""
