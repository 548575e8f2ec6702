// Drives llama.cpp-omni's audio and vision encoders (a build the user made from its source)
// through their own C API, preprocessing included, so that benchmarks/lco_compare.py can set
// their embeddings beside ours for the same inputs. Compiled at benchmark time by
// benchmarks/lco.py; nothing of llama.cpp-omni is part of this project.
//
//   encoders_driver <audio gguf> <vision gguf> <threads>
//   stdin, one command per line; each answers one line, "ok <rows> <cols>" or "error <why>":
//     audio <in.wav> <out.f32>    the file (any WAV its decoder reads) as its omni pipeline
//                                 encodes a clip: decoded to 16 kHz, padded, log-mel, encoder;
//                                 the encoder's streaming history carries over between calls
//     clear                       forgets that history (a new utterance)
//     mel <in.wav> <out.f32>      only the front end: its log-mel, <frames> rows of <mels>
//     image <in.rgb> <w> <h> <max_slices> <out.f32>
//                                 raw RGB bytes; its preprocessing (resize, slicing when
//                                 max_slices > 0) and every entry encoded, overview first
//     file <image file> <max_slices> <out.f32>
//                                 an encoded image (JPEG, PNG) decoded by its pipeline's own
//                                 loader, then as `image`
//     quit
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "audition.h"
#include "vision.h"

void vision_set_max_slice_nums(struct vision_ctx * ctx, int max_slice_nums);  // omni.h
bool vision_image_load_from_bytes(const unsigned char * bytes, size_t bytes_length,
                                  struct vision_image_u8 * img);  // omni.cpp, its image loader

static std::vector<uint8_t> read_bytes(const std::string & path) {
    std::ifstream f(path, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

static bool write_floats(const std::string & path, const std::vector<float> & v) {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char *>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
    return static_cast<bool>(f);
}

static std::string encode_audio(audition_ctx * ctx, int threads, const std::string & in, const std::string & out) {
    audition_audio_u8 * file = audition_audio_u8_init();
    file->buf = read_bytes(in);
    audition_audio_f32 * mel = nullptr;
    if (file->buf.empty() || !audition_audio_preprocess(ctx, file, &mel)) return "error preprocess " + in;
    const int rows = audition_n_output_tokens(ctx, mel), cols = audition_n_mmproj_embd(ctx);
    std::vector<float> emb(static_cast<size_t>(rows) * cols);
    if (!audition_audio_encode(ctx, threads, mel, emb.data())) return "error encode";
    if (!write_floats(out, emb)) return "error write " + out;
    return "ok " + std::to_string(rows) + " " + std::to_string(cols);
}

static std::string log_mel(audition_ctx * ctx, const std::string & in, const std::string & out) {
    audition_audio_u8 * file = audition_audio_u8_init();
    file->buf = read_bytes(in);
    audition_audio_f32 * mel = nullptr;
    if (file->buf.empty() || !audition_audio_preprocess(ctx, file, &mel)) return "error preprocess " + in;
    if (!write_floats(out, mel->buf)) return "error write " + out;
    return "ok " + std::to_string(mel->nx) + " " + std::to_string(mel->ny);
}

static std::string encode_u8(vision_ctx * ctx, int threads, vision_image_u8 * img, int slices,
                             const std::string & out) {
    vision_set_max_slice_nums(ctx, slices);
    vision_image_f32_batch * batch = vision_image_f32_batch_init();
    if (!vision_image_preprocess(ctx, img, batch)) return "error preprocess";
    const int per = vision_n_output_tokens(ctx), cols = vision_n_mmproj_embd(ctx);
    std::vector<float> emb, one(static_cast<size_t>(per) * cols);
    for (auto & entry : batch->entries) {
        if (!vision_image_encode(ctx, threads, entry.get(), one.data())) return "error encode";
        emb.insert(emb.end(), one.begin(), one.end());
    }
    if (!write_floats(out, emb)) return "error write " + out;
    return "ok " + std::to_string(per * batch->entries.size()) + " " + std::to_string(cols);
}

static std::string encode_image(vision_ctx * ctx, int threads, const std::string & in, int w, int h, int slices,
                                const std::string & out) {
    vision_image_u8 * img = vision_image_u8_init();
    img->nx = w;
    img->ny = h;
    img->buf = read_bytes(in);
    if (img->buf.size() != static_cast<size_t>(w) * h * 3) return "error size of " + in;
    return encode_u8(ctx, threads, img, slices, out);
}

static std::string encode_file(vision_ctx * ctx, int threads, const std::string & in, int slices,
                               const std::string & out) {
    const std::vector<uint8_t> bytes = read_bytes(in);
    vision_image_u8 * img = vision_image_u8_init();
    if (bytes.empty() || !vision_image_load_from_bytes(bytes.data(), bytes.size(), img)) return "error decode " + in;
    return encode_u8(ctx, threads, img, slices, out);
}

int main(int argc, char ** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: %s <audio gguf> <vision gguf> <threads>\n", argv[0]);
        return 2;
    }
    const int threads = std::atoi(argv[3]);
    audition_ctx * audio = audition_init(argv[1], {false, GGML_LOG_LEVEL_ERROR});
    vision_ctx * vision = vision_init(argv[2], {false, GGML_LOG_LEVEL_ERROR, nullptr});
    if (!audio || !vision) {
        std::cout << "error loading the encoders" << std::endl;
        return 1;
    }
    std::cout << "ready" << std::endl;
    for (std::string line; std::getline(std::cin, line);) {
        std::istringstream in(line);
        std::string cmd, a, b;
        in >> cmd;
        if (cmd == "quit") break;
        if (cmd == "clear") {
            audition_whisper_clear_kv_cache(audio);
            std::cout << "ok 0 0" << std::endl;
        } else if (cmd == "mel" && in >> a >> b) {
            std::cout << log_mel(audio, a, b) << std::endl;
        } else if (cmd == "audio" && in >> a >> b) {
            std::cout << encode_audio(audio, threads, a, b) << std::endl;
        } else if (cmd == "file") {
            int slices = 0;
            in >> a >> slices >> b;
            std::cout << (in ? encode_file(vision, threads, a, slices, b) : "error usage") << std::endl;
        } else if (cmd == "image") {
            int w = 0, h = 0, slices = 0;
            in >> a >> w >> h >> slices >> b;
            std::cout << (in ? encode_image(vision, threads, a, w, h, slices, b) : "error usage") << std::endl;
        } else {
            std::cout << "error unknown command" << std::endl;
        }
    }
    audition_free(audio);
    vision_free(vision);
    return 0;
}
