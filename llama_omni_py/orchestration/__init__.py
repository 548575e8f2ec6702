"""One request end to end, on one engine slot:

    channels     the stage threads, bounded channels, cancellation, the asyncio bridge
    stages       the bodies of the LLM, TTS and Token2Wav stages, written once
    turn_based   one turn-based request: prompt fitting, the pipeline, the request's Timings
    slot         EngineModules (what an engine loads once) and SlotStages (one slot's stages)
    inputs       a request's inputs: checked, media encoded, the prompt assembled
    timings      the stages' events -> Timings, and the stage profile

May import the base, native, data and modules layers; never duplex/, voice/, session.py or the
apps (they build on this).
"""
