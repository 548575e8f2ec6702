"""One adapter per MiniCPM-o module over the compiled core, each owning its ``to_native()`` (the
core's options struct filled from its Python config, through native_options.fill):

    llm/          the LLM (Qwen3 through libllama): the model, the context its slots share and
                  its decode scheduler, the prompt, beam search, the text stream
    tts           the TTS: condition rows -> speech codes
    token2wav     Token2Wav: speech codes -> 24 kHz audio (Token2Mel and the HiFT vocoder)
    apm, vpm      the audio and vision encoders
    cann_audit    the CANN op-support audit of every module's graphs

May import the base, native and data layers (config, results, content, media, video, vision,
modelset, device); never orchestration/ or anything above it.
"""
