"""Upstream llama.cpp's own MiniCPM-V vision path (libmtmd from the pinned llama-cpp-python
wheel, through its ctypes bindings): an independent C++ implementation to compare our VPM with."""

from __future__ import annotations

import ctypes

import numpy as np


class UpstreamVision:
    def __init__(self, llm_gguf: str, vision_gguf: str, threads: int = 2):
        import llama_cpp
        from llama_cpp import mtmd_cpp as m

        self._llama, self._m = llama_cpp, m
        self.model = llama_cpp.llama_model_load_from_file(llm_gguf.encode(), llama_cpp.llama_model_default_params())
        params = m.mtmd_context_params_default()
        params.use_gpu, params.print_timings, params.n_threads = False, False, threads
        self.ctx = m.mtmd_init_from_file(vision_gguf.encode(), self.model, params)
        if not self.ctx:
            raise RuntimeError("libmtmd could not load " + vision_gguf)
        self.n_embd = llama_cpp.llama_model_n_embd(self.model)

    def encode(self, image: np.ndarray) -> list[np.ndarray]:
        """(h, w, 3) uint8 -> one (n, n_embd) array per image chunk (overview, then slices)."""
        m = self._m
        h, w = image.shape[:2]
        data = (ctypes.c_uint8 * image.size).from_buffer_copy(np.ascontiguousarray(image).tobytes())
        bitmap = m.mtmd_bitmap_init(w, h, data)
        chunks = m.mtmd_input_chunks_init()
        text = m.mtmd_input_text()
        marker = m.mtmd_default_marker()
        text.text, text.text_len, text.add_special, text.parse_special = marker, len(marker), False, True
        try:
            if m.mtmd_tokenize(self.ctx, chunks, ctypes.byref(text), (m.mtmd_bitmap_p_ctypes * 1)(bitmap), 1) != 0:
                raise RuntimeError("mtmd_tokenize failed")
            out = []
            for i in range(m.mtmd_input_chunks_size(chunks)):
                chunk = m.mtmd_input_chunks_get(chunks, i)
                if m.mtmd_input_chunk_get_type(chunk) != 1:  # MTMD_INPUT_CHUNK_TYPE_IMAGE
                    continue
                if m.mtmd_encode_chunk(self.ctx, chunk) != 0:
                    raise RuntimeError("mtmd_encode_chunk failed")
                n = m.mtmd_input_chunk_get_n_tokens(chunk)
                emb = np.ctypeslib.as_array(m.mtmd_get_output_embd(self.ctx), shape=(n * self.n_embd,))
                out.append(emb.reshape(n, self.n_embd).copy())
            return out
        finally:
            m.mtmd_input_chunks_free(chunks)
            m.mtmd_bitmap_free(bitmap)

    def close(self) -> None:
        if self.ctx:
            self._m.mtmd_free(self.ctx)
            self.ctx = None
        if self.model:
            self._llama.llama_model_free(self.model)
            self.model = None
