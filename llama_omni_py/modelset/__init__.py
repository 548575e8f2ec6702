"""Model sets: llama.cpp-omni's GGUF module set (layout, discovery, validation), the one table of
every file's tensor names and shapes (``spec``), and the random-weight generator built on it.

    layout       ModelSet, discover(), validate(): what a set on disk holds and whether it loads
    spec         every file's metadata keys, tensor names, shapes and types (tiny and real sizes)
    generate     make_models(): a whole set with random weights, written by gguf_writer
    gguf_writer  a streaming GGUF writer
    dsp          the mel filter bank and 2-D sin-cos tables the generator writes
    cache_write  writing into the shared cache: a file lock, a temporary name, one rename

The package imports nothing itself: ``generate`` and ``spec`` are pure Python and load without the
compiled core (a GPU check writes a set before the core is built); ``layout`` reads files through
the core. ``llama_omni_py`` exports discover, validate and make_models.

    hub, hub_clients, modelscope_client, hub_cli   a set by its repository id (docs/model-files.md)
    random_set   the random-weight set that runs when no model is named, and its short replies

May import the base layer, ``_native`` and device/ (layout, hub_cli) and config (random_set);
nothing above the data layer.
"""
