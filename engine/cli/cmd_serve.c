/*
 * cmd_serve.c — `pic-engine serve`: parse options, run the HTTP server.
 */
#include <getopt.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "server.h"

static void
serve_usage(FILE *f)
{
    fprintf(f,
        "usage: pic-engine serve [--model DIR] [--host IP] [--port N] [--id NAME] [options]\n"
        "  --model DIR             checkpoint directory (without it: no inference, 503)\n"
        "  --host IP               listen address (default 127.0.0.1)\n"
        "  --port N                listen port (default 8000; 0 picks a free port)\n"
        "  --id NAME               engine id for status and the index (default engine-PORT)\n"
        "  --port-file PATH        write the bound port to PATH once ready (the model\n"
        "                          loaded; /healthz answers 503 \"loading\" until then)\n"
        "  --served-model-name S   model id in responses (default: the directory's name)\n"
        "  --template NAME         chat template: qwen3, qwen3.5, chatml, smollm2, llama3, llama3.1,\n"
        "                          llama3.2, mistral or mistral-nemo (default: from the model)\n"
        "  --marker S              document delimiter in prompts (default <|pic_sep|>)\n"
        "  --workers N             compute threads (default 1)\n"
        "  --threads N             OpenMP threads per worker (default cores / workers)\n"
        "  --batch N               running sequences per worker (default 8)\n"
        "  --queue N               waiting requests before 429 (default 64)\n"
        "  --ctx N                 positions per sequence (default min(model, 32768))\n"
        "  --max-tokens N          when a request sets none (default 0: up to the context)\n"
        "  --reasoning-budget N    reasoning tokens before a constrained answer (response_format,\n"
        "                          forced tool call) with thinking on; then the think block is\n"
        "                          closed for the model (default 256; per request: thinking_budget)\n"        "  --request-timeout-ms N  per-request deadline, 504 after (default 600000; 0 off)\n"
        "  --max-body BYTES        request body limit, 413 above (default 16777216)\n"
        "  --redis IP:PORT         register in Redis (or unix:/path); default: no registry\n"
        "  --redis-password-file PATH\n"
        "                          AUTH with the file's first line (Redis requirepass)\n"
        "  --redis-user NAME       ... as this ACL user (with --redis-password-file)\n"
        "  --advertise HOST:PORT   address announced in Redis (default host:bound port)\n"
        "  --heartbeat-ms N        Redis heartbeat period (default 1000)\n"
        "  --registry-ttl N        seconds before a silent engine expires (default 5)\n"
        "  --cache-bytes N         one budget for every cache: prefix tree (KV, checkpoints,\n"
        "                          session ends) and PIC entries, evicted across them\n"
        "                          by --cache-evict (default 805306368)\n"
        "  --cache-evict P         cost (default): GreedyDual-Size across tree and entries\n"
        "                          (clock + recompute FLOPs / bytes, lowest first), or lru\n"
        "  --cache-mode M          exact (default: exact prefix tree first, then PIC\n"
        "                          entries, then recompute), prefix (tree only), pic\n"
        "                          (PIC entries only), naive, or full (no caches)\n"
        "  --pool-bytes N, --prefix-bytes N\n"
        "                          deprecated: without --cache-bytes their sum (defaults\n"
        "                          268435456 and 536870912) becomes --cache-bytes\n"
        "  --prefix-block N        prefix tree block in tokens (default 64)\n"
        "  --checkpoints M         recurrent checkpoints per prefix-tree edge (path between\n"
        "                          branch points; default 4)\n"
        "  --seam N|off            seam width of PIC entries; off: PIC segments recomputed\n"
        "                          (exact prefix reuse only; default: the calibration's,\n"
        "                          else 8)\n"
        "  --seam-doc N|off        that of client-delimited documents (default: the\n"
        "                          calibration's, else --seam's)\n"
        "  --calibration FILE      seam widths from this file of `pic-engine calibrate`\n"
        "                          (default: DIR/pic_calibration.json, or FILE without\n"
        "                          .gguf + .pic_calibration.json, when present)\n"
        "  --entry-dtype T         storage of PIC entries: bf16 (default) or f32\n"
        "  --weights F             big matrices as auto (default: bf16 if the checkpoint\n"
        "                          stores bf16, else f32), f32, bf16, bf16dot (bf16 and\n"
        "                          x rounded to bf16 at their matmuls: bf16 dot products)\n"
        "                          or q8 (8-bit blocks)\n"
        "  --device D              cpu (default), cuda (build/libpic_cuda.so, bf16 weights;\n"
        "                          --cache-mode full, one worker) or cpu-dev (tests)\n"
        "  --min-segment BYTES     shorter segments are recomputed (default 128)\n"
        "  --split-documents on|off  off: --marker is plain text and unmarked text is cut\n"
        "                          by CDC only, as a gateway with pic_split_documents off\n"
        "                          renders (default on)\n"
        "  --peer-timeout-ms N     deadline of a pull or remote prefill (default 30000)\n"
        "  --no-batch-decode       one forward per decode token instead of one per round\n"
        "  --pool-secret-file PATH pool credential (16+ bytes): peer endpoints, plans and\n"
        "                          frames need its HMAC; without it both are refused (403)\n"
        "  --insecure-pool         no credential: open peer endpoints and plans to anyone\n"
        "                          who can connect (a trusted network only)\n"
        "  --max-frame-bytes N     largest entry frame taken from a peer (default 268435456)\n"
        "  --tls-cert PEM, --tls-key PEM\n"
        "                          serve TLS on the listener and reach peers (pulls, remote\n"
        "                          prefills) over TLS presenting this certificate\n"
        "  --tls-client-ca PEM     the pool CA: clients without a certificate it signed are\n"
        "                          refused, and peers' certificates must chain to it\n"
        "  --script FILE           scripted replies for tests and demos of models that cannot\n"
        "                          decide (JSON [{\"when\": S, \"reply\": T}]: a request whose\n"
        "                          last message contains S generates T, token by token through\n"
        "                          the model, then stops)\n"
        "  --load-hold FILE        tests: pause the model load after its first tensor\n"
        "                          while FILE exists\n");
}

/* Parse a non-negative integer no larger than max; -1 on error. */
static long long
serve_number(const char *s, long long max)
{
    char      *end;
    long long  v = strtoll(s, &end, 10);

    if (*s == '\0' || *end != '\0' || v < 0 || v > max) {
        return -1;
    }
    return v;
}

int
pic_cmd_serve(int argc, char **argv)
{
    enum {
        OPT_NAME = 256, OPT_TEMPLATE, OPT_MARKER, OPT_WORKERS, OPT_BATCH, OPT_QUEUE,
        OPT_CTX, OPT_MAXTOK, OPT_TIMEOUT, OPT_MAXBODY, OPT_REDIS, OPT_ADVERTISE,
        OPT_HEARTBEAT, OPT_TTL, OPT_POOL, OPT_MODE, OPT_SEAM, OPT_DTYPE, OPT_WEIGHTS, OPT_MINSEG,
        OPT_SEAMDOC, OPT_PEERTO, OPT_NOBATCH, OPT_SECRET, OPT_MAXFRAME, OPT_SCRIPT, OPT_INSECURE,
        OPT_PBYTES, OPT_PBLOCK, OPT_CKPT, OPT_HOLD, OPT_CBYTES, OPT_RPASS, OPT_RUSER,
        OPT_EVICT, OPT_TLSCERT, OPT_TLSKEY, OPT_TLSCA, OPT_DEVICE, OPT_CALIB, OPT_RBUDGET,
        OPT_SPLIT,
    };
    static const struct option longopts[] = {
        { "model", required_argument, NULL, 'm' },
        { "host", required_argument, NULL, 'H' },
        { "port", required_argument, NULL, 'p' },
        { "id", required_argument, NULL, 'i' },
        { "port-file", required_argument, NULL, 'f' },
        { "threads", required_argument, NULL, 't' },
        { "served-model-name", required_argument, NULL, OPT_NAME },
        { "template", required_argument, NULL, OPT_TEMPLATE },
        { "marker", required_argument, NULL, OPT_MARKER },
        { "workers", required_argument, NULL, OPT_WORKERS },
        { "batch", required_argument, NULL, OPT_BATCH },
        { "queue", required_argument, NULL, OPT_QUEUE },
        { "ctx", required_argument, NULL, OPT_CTX },
        { "max-tokens", required_argument, NULL, OPT_MAXTOK },
        { "reasoning-budget", required_argument, NULL, OPT_RBUDGET },
        { "request-timeout-ms", required_argument, NULL, OPT_TIMEOUT },
        { "max-body", required_argument, NULL, OPT_MAXBODY },
        { "redis", required_argument, NULL, OPT_REDIS },
        { "redis-password-file", required_argument, NULL, OPT_RPASS },
        { "redis-user", required_argument, NULL, OPT_RUSER },
        { "advertise", required_argument, NULL, OPT_ADVERTISE },
        { "heartbeat-ms", required_argument, NULL, OPT_HEARTBEAT },
        { "registry-ttl", required_argument, NULL, OPT_TTL },
        { "pool-bytes", required_argument, NULL, OPT_POOL },
        { "cache-bytes", required_argument, NULL, OPT_CBYTES },
        { "cache-evict", required_argument, NULL, OPT_EVICT },
        { "cache-mode", required_argument, NULL, OPT_MODE },
        { "seam", required_argument, NULL, OPT_SEAM },
        { "seam-doc", required_argument, NULL, OPT_SEAMDOC },
        { "calibration", required_argument, NULL, OPT_CALIB },
        { "entry-dtype", required_argument, NULL, OPT_DTYPE },
        { "weights", required_argument, NULL, OPT_WEIGHTS },
        { "device", required_argument, NULL, OPT_DEVICE },
        { "min-segment", required_argument, NULL, OPT_MINSEG },
        { "split-documents", required_argument, NULL, OPT_SPLIT },
        { "peer-timeout-ms", required_argument, NULL, OPT_PEERTO },
        { "no-batch-decode", no_argument, NULL, OPT_NOBATCH },
        { "pool-secret-file", required_argument, NULL, OPT_SECRET },
        { "insecure-pool", no_argument, NULL, OPT_INSECURE },
        { "max-frame-bytes", required_argument, NULL, OPT_MAXFRAME },
        { "tls-cert", required_argument, NULL, OPT_TLSCERT },
        { "tls-key", required_argument, NULL, OPT_TLSKEY },
        { "tls-client-ca", required_argument, NULL, OPT_TLSCA },
        { "script", required_argument, NULL, OPT_SCRIPT },
        { "prefix-bytes", required_argument, NULL, OPT_PBYTES },
        { "prefix-block", required_argument, NULL, OPT_PBLOCK },
        { "checkpoints", required_argument, NULL, OPT_CKPT },
        { "load-hold", required_argument, NULL, OPT_HOLD },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    pic_server_opts opts = {
        .host = "127.0.0.1", .port = 8000, .max_queue = -1,
        .request_timeout_ms = 600000, .max_body = 16u << 20,
        .heartbeat_ms = 1000, .registry_ttl_s = 5, .pool_bytes = 256u << 20,
        .seam = -1, .seam_doc = -1, .min_segment = 128, .peer_timeout_ms = 30000,
        .max_frame_bytes = 256u << 20,
        .prefix_bytes = 512u << 20, .prefix_block = 64, .checkpoints = 4,
        .reasoning_budget = 256,
    };
    char            idbuf[64];
    long long       v;
    int             c, old_budget = 0;

    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        long long max = c == 'p' ? 65535 : c == OPT_TIMEOUT || c == OPT_POOL
                                           || c == OPT_MAXBODY || c == OPT_MAXFRAME
                                           || c == OPT_PBYTES || c == OPT_CBYTES
                                           ? (1LL << 50) : 1 << 30;
        switch (c) {
        case 'm': opts.model_dir = optarg; continue;
        case 'H': opts.host = optarg; continue;
        case 'i': opts.id = optarg; continue;
        case 'f': opts.port_file = optarg; continue;
        case OPT_NAME: opts.model_name = optarg; continue;
        case OPT_TEMPLATE: opts.template_name = optarg; continue;
        case OPT_MARKER: opts.marker = optarg; continue;
        case OPT_SPLIT:
            if (strcmp(optarg, "on") != 0 && strcmp(optarg, "off") != 0) {
                fprintf(stderr, "pic-engine serve: --split-documents: on or off, not '%s'\n",
                        optarg);
                return 2;
            }
            opts.no_split_documents = strcmp(optarg, "off") == 0;
            continue;
        case OPT_REDIS: opts.redis = optarg; continue;
        case OPT_RPASS: opts.redis_password_file = optarg; continue;
        case OPT_RUSER: opts.redis_user = optarg; continue;
        case OPT_ADVERTISE: opts.advertise = optarg; continue;
        case OPT_MODE: opts.cache_mode = optarg; continue;
        case OPT_EVICT: opts.cache_evict = optarg; continue;
        case OPT_DTYPE: opts.entry_dtype = optarg; continue;
        case OPT_CALIB: opts.calibration = optarg; continue;
        case OPT_WEIGHTS: opts.weights = optarg; continue;
        case OPT_DEVICE: opts.device = optarg; continue;
        case OPT_NOBATCH: opts.no_batch_decode = 1; continue;
        case OPT_SECRET: opts.pool_secret_file = optarg; continue;
        case OPT_INSECURE: opts.insecure_pool = 1; continue;
        case OPT_TLSCERT: opts.tls_cert = optarg; continue;
        case OPT_TLSKEY: opts.tls_key = optarg; continue;
        case OPT_TLSCA: opts.tls_client_ca = optarg; continue;
        case OPT_SCRIPT: opts.script = optarg; continue;
        case OPT_HOLD: opts.load_hold = optarg; continue;
        case 'h': serve_usage(stdout); return 0;
        case 'p': case 't': case OPT_WORKERS: case OPT_BATCH: case OPT_QUEUE: case OPT_CTX:
        case OPT_MAXTOK: case OPT_TIMEOUT: case OPT_MAXBODY: case OPT_HEARTBEAT:
        case OPT_TTL: case OPT_POOL: case OPT_SEAM: case OPT_SEAMDOC: case OPT_MINSEG:
        case OPT_PEERTO: case OPT_MAXFRAME: case OPT_PBYTES: case OPT_PBLOCK:
        case OPT_CKPT: case OPT_CBYTES: case OPT_RBUDGET:
            break;
        default: serve_usage(stderr); return 2;
        }
        if ((c == OPT_SEAM || c == OPT_SEAMDOC) && strcmp(optarg, "off") == 0) {
            *(c == OPT_SEAM ? &opts.seam : &opts.seam_doc) = PIC_SEAM_OFF;
            continue;
        }
        v = serve_number(optarg, max);
        if (v < 0) {
            fprintf(stderr, "pic-engine serve: invalid number '%s'\n", optarg);
            return 2;
        }
        switch (c) {
        case 'p': opts.port = (int) v; break;
        case 't': opts.threads = (int) v; break;
        case OPT_WORKERS: opts.workers = (int) v; break;
        case OPT_BATCH: opts.max_batch = (int) v; break;
        case OPT_QUEUE: opts.max_queue = (int) v; break;
        case OPT_CTX: opts.ctx = (int) v; break;
        case OPT_MAXTOK: opts.default_max_tokens = (int) v; break;
        case OPT_RBUDGET: opts.reasoning_budget = (int) v; break;
        case OPT_TIMEOUT: opts.request_timeout_ms = v; break;
        case OPT_MAXBODY: opts.max_body = (size_t) v; break;
        case OPT_HEARTBEAT: opts.heartbeat_ms = (int) v; break;
        case OPT_TTL: opts.registry_ttl_s = (int) v; break;
        case OPT_POOL: opts.pool_bytes = (uint64_t) v; old_budget = 1; break;
        case OPT_CBYTES: opts.cache_bytes = (uint64_t) v; break;
        case OPT_SEAM: opts.seam = (int) v; break;
        case OPT_SEAMDOC: opts.seam_doc = (int) v; break;
        case OPT_MINSEG: opts.min_segment = (size_t) v; break;
        case OPT_PEERTO: opts.peer_timeout_ms = (int) v; break;
        case OPT_MAXFRAME: opts.max_frame_bytes = (uint64_t) v; break;
        case OPT_PBYTES: opts.prefix_bytes = (uint64_t) v; old_budget = 1; break;
        case OPT_PBLOCK: opts.prefix_block = (int) v; break;
        case OPT_CKPT: opts.checkpoints = (int) v; break;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "pic-engine serve: unexpected argument '%s'\n", argv[optind]);
        serve_usage(stderr);
        return 2;
    }
    if (old_budget && opts.cache_bytes == 0) {
        fprintf(stderr, "pic-engine serve: --pool-bytes and --prefix-bytes are deprecated; "
                "using --cache-bytes %llu (their sum)\n",
                (unsigned long long) (opts.pool_bytes + opts.prefix_bytes));
        opts.cache_bytes = opts.pool_bytes + opts.prefix_bytes;
    }
    if (opts.cache_bytes == 0) {
        opts.cache_bytes = 768u << 20;
    }
    if (opts.id == NULL) {
        snprintf(idbuf, sizeof(idbuf), "engine-%d", opts.port);
        opts.id = idbuf;
    }
    /* Memory a forward frees stays with the process for the next one: below
     * 32 MiB nothing is mmap'd (glibc's default threshold, 128 KiB and rising
     * only as mmap'd blocks are freed, left per-forward buffers and new
     * checkpoints mmap'd and faulted in again every forward; the kernels'
     * scratch is per thread, kernels/cpu/scratch.c), and the heap is given
     * back only past 64 MiB free at its top.  Measured
     * (bench/agent.py's quick agent loop, minor faults per timed request):
     * exact-first turns ~1,100 -> ~650 (the rest is the prefix tree's growth:
     * new KV blocks and checkpoints), full recompute ~500 -> ~50; a fault
     * costs ~1 us here. */
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
    return pic_server_run(&opts);
}
