/*
 * status.c — what the engine tells about itself: GET /healthz, GET /status
 * (JSON: model, caches, scheduler, requests in flight, HTTP counters,
 * registration), GET /metrics (Prometheus text) and the load figures it
 * registers in Redis.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/http.h>

#include <cjson/cJSON.h>

#include "calibrate.h"
#include "inflight.h"
#include "pic_kernels.h"
#include "pic_time.h"
#include "reply.h"
#include "status.h"
#include "transition.h"

void
pic_server_load(void *arg, pic_registry_load *out)
{
    pic_server     *srv = arg;
    pic_sched_stats st;

    memset(out, 0, sizeof(*out));
    if (srv->pool != NULL) {
        pic_pool_stats ps;
        pic_pool_stats_get(srv->pool, &ps);
        out->free_bytes = ps.budget > ps.bytes ? ps.budget - ps.bytes : 0;
    }
    if (srv->sched == NULL) {
        return;
    }
    pic_sched_stats_get(srv->sched, &st);
    out->capacity = st.workers * st.max_batch;
    out->running = st.running;
    out->queued = st.queued;
}

/* The load's progress as {"phase", "tensors_done", ..., "seconds"}. */
static cJSON *
pic_server_loading_doc(pic_server *srv)
{
    cJSON             *o = cJSON_CreateObject();
    pic_load_progress  p;

    pic_load_progress_get(&srv->load, &p);
    cJSON_AddStringToObject(o, "phase", pic_load_phase_name(p.phase));
    cJSON_AddNumberToObject(o, "tensors_done", p.tensors_done);
    cJSON_AddNumberToObject(o, "tensors_total", p.tensors_total);
    cJSON_AddNumberToObject(o, "bytes_done", (double) p.bytes_done);
    cJSON_AddNumberToObject(o, "bytes_total", (double) p.bytes_total);
    cJSON_AddNumberToObject(o, "seconds", (double) (time(NULL) - srv->started));
    return o;
}

void
pic_endpoint_healthz(pic_server *srv, struct evhttp_request *req)
{
    cJSON *doc = cJSON_CreateObject();

    cJSON_AddStringToObject(doc, "status", srv->loading ? "loading" : "ok");
    cJSON_AddStringToObject(doc, "id", srv->opts->id);
    cJSON_AddBoolToObject(doc, "model_loaded", !srv->loading && srv->model != NULL);
    if (srv->loading) {
        cJSON_AddItemToObject(doc, "loading", pic_server_loading_doc(srv));
    }
    pic_reply_json(req, srv->loading ? 503 : 200, doc);
}

/* Each request in flight: where its job stands (prefill done / total). */
static cJSON *
pic_server_live_doc(pic_server *srv)
{
    cJSON            *arr = cJSON_CreateArray(), *o, *p;
    pic_job_progress  jp;
    int64_t           now = pic_now_ns();

    for (pic_inflight *c = srv->live; c != NULL; c = c->next) {
        if (c->job == NULL) {
            continue;
        }
        pic_job_progress_get(c->job, &jp);
        o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "id", c->id);
        cJSON_AddStringToObject(o, "kind", c->binary ? "peer_prefill"
                                : c->kind == PIC_REQ_CHAT ? "chat" : "completion");
        cJSON_AddBoolToObject(o, "stream", c->stream);
        cJSON_AddStringToObject(o, "state", !jp.started ? "queued"
                                : jp.n_prompt == 0 || jp.n_prefilled < jp.n_prompt
                                ? "prefill" : "decode");
        p = cJSON_AddObjectToObject(o, "prefill");
        cJSON_AddNumberToObject(p, "done", jp.n_prefilled);
        cJSON_AddNumberToObject(p, "total", jp.n_prompt);
        cJSON_AddNumberToObject(o, "cached_tokens", jp.n_cached);
        cJSON_AddNumberToObject(o, "generated_tokens", jp.n_gen);
        cJSON_AddNumberToObject(o, "age_ms", (double) (now - c->t0_ns) * 1e-6);
        cJSON_AddItemToArray(arr, o);
    }
    return arr;
}

/* The pool's capacity (DESIGN §3.2): a seam entry costs T + S|0 + conv
 * tail per linear layer whatever its length ("entry_fixed_bytes"), plus K
 * and V per interior token at the attention layers ("kv_bytes_per_token");
 * below break_even_tokens it holds more bytes per token than plain KV.
 * Entries and tokens the budget holds at the mean length of the entries
 * held now (at the break-even length while the pool is empty). */
static void
pic_status_capacity(const pic_server *srv, const pic_pool_stats *ps, cJSON *o)
{
    const pic_config *c;
    size_t es = pic_dtype_size(srv->plan.seam.dtype), fixed = 0, kv = 0, gqa = 0;
    double mean, tokens;
    const char *family = "none";

    if (srv->model == NULL) {
        return;
    }
    c = &srv->model->cfg;

    for (int l = 0; l < c->n_layers; l++) {
        if (pic_layer_recurrent(c->layer_type[l])) {
            /* T in the layer's transition family, S|0, the conv tail */
            fixed += pic_transition_bytes(c, c->layer_type[l], es)
                     + (size_t) c->lin_v_heads * c->lin_k_dim * c->lin_v_dim * es
                     + (size_t) pic_config_conv_ch(c) * pic_config_conv_k1(c) * sizeof(float);
            family = pic_transition_of(c->layer_type[l])->name;
        } else {
            /* MLA: the latent row; gqa: the same heads' K and V as GQA keeps them */
            kv += (size_t) pic_config_cache_heads(c)
                  * (pic_config_cache_kdim(c) + pic_config_cache_vdim(c)) * es;
            gqa += c->mla ? (size_t) c->n_q_heads
                            * (c->qk_nope_dim + c->qk_rope_dim + c->v_head_dim) * es : 0;
        }
    }
    tokens = kv ? (double) fixed / (double) kv : 0.0;
    mean = (double) fixed + tokens * (double) kv;
    if (ps->items > 0 && ps->bytes > fixed * ps->items && kv) {
        mean = (double) ps->bytes / (double) ps->items;
        tokens = (mean - (double) fixed) / (double) kv;
    }
    cJSON_AddStringToObject(o, "transition_family", family);
    cJSON_AddNumberToObject(o, "entry_fixed_bytes", (double) fixed);
    cJSON_AddNumberToObject(o, "kv_bytes_per_token", (double) kv);
    if (c->mla) {
        cJSON_AddNumberToObject(o, "kv_bytes_per_token_as_gqa", (double) gqa);
    }
    cJSON_AddNumberToObject(o, "break_even_tokens", kv ? (double) fixed / (double) kv : 0.0);
    cJSON_AddNumberToObject(o, "mean_entry_tokens", tokens);
    cJSON_AddNumberToObject(o, "entries", mean > 0 ? (double) (size_t) (ps->budget / mean) : 0);
    cJSON_AddNumberToObject(o, "tokens",
                            mean > 0 ? (double) (size_t) ((double) ps->budget / mean * tokens)
                                     : 0);
}

void
pic_endpoint_status(pic_server *srv, struct evhttp_request *req)
{
    cJSON          *doc = cJSON_CreateObject(), *o;
    pic_sched_stats st;
    char            fp[24];

    cJSON_AddStringToObject(doc, "engine", "pic-engine");
    cJSON_AddStringToObject(doc, "version", PIC_ENGINE_VERSION);
    cJSON_AddStringToObject(doc, "id", srv->opts->id);
    cJSON_AddStringToObject(doc, "addr", srv->addr);
    cJSON_AddNumberToObject(doc, "port", srv->port);
    cJSON_AddNumberToObject(doc, "uptime_s", (double) (time(NULL) - srv->started));
    if (srv->opts->model_dir) {
        cJSON_AddStringToObject(doc, "model_dir", srv->opts->model_dir);
    } else {
        cJSON_AddNullToObject(doc, "model_dir");
    }
    cJSON_AddNumberToObject(doc, "requests", (double) srv->hs.requests);
    cJSON_AddNumberToObject(doc, "errors", (double) srv->hs.errors);
    cJSON_AddStringToObject(doc, "status", srv->loading ? "loading" : "ok");
    if (srv->loading) {
        /* nothing below exists yet: the gateway's probe sees a 503 and
         * keeps the engine out of rotation until it is ready */
        cJSON_AddItemToObject(doc, "loading", pic_server_loading_doc(srv));
        cJSON_AddNullToObject(doc, "model");
        pic_reply_json(req, 503, doc);
        return;
    }

    if (srv->model) {
        o = cJSON_AddObjectToObject(doc, "model");
        cJSON_AddStringToObject(o, "name", srv->model_name);
        cJSON_AddStringToObject(o, "type", srv->model->cfg.model_type);
        /* what segment keys are made with (the gateway learns it here) */
        cJSON_AddStringToObject(o, "fingerprint", srv->key_fp);
        snprintf(fp, sizeof(fp), "%016llx", (unsigned long long) srv->model->fingerprint);
        cJSON_AddStringToObject(o, "weights_fingerprint", fp);
        cJSON_AddNumberToObject(o, "layers", srv->model->cfg.n_layers);
        cJSON_AddStringToObject(o, "weights", pic_model_weights_name(srv->model));
        cJSON_AddNumberToObject(o, "weight_bytes", (double) srv->model->weight_bytes);
        cJSON_AddNumberToObject(o, "context", srv->max_ctx);
        cJSON_AddStringToObject(o, "template", pic_template_dialect_name(srv->dialect));
        cJSON_AddNumberToObject(o, "weight_bytes", (double) srv->model->weight_bytes);
    } else {
        cJSON_AddNullToObject(doc, "model");
    }

    o = cJSON_AddObjectToObject(doc, "http");
    cJSON_AddNumberToObject(o, "requests", (double) srv->hs.requests);
    cJSON_AddNumberToObject(o, "errors", (double) srv->hs.errors);
    cJSON_AddNumberToObject(o, "status_4xx", (double) srv->hs.status_4xx);
    cJSON_AddNumberToObject(o, "status_5xx", (double) srv->hs.status_5xx);
    cJSON_AddNumberToObject(o, "completions", (double) srv->hs.completions);
    cJSON_AddNumberToObject(o, "streams", (double) srv->hs.streams);
    cJSON_AddNumberToObject(o, "in_flight", srv->n_live);
    cJSON_AddNumberToObject(o, "rejected_429", (double) srv->hs.rejected_429);
    cJSON_AddNumberToObject(o, "expired_504", (double) srv->hs.expired_504);
    cJSON_AddNumberToObject(o, "too_large_413", (double) srv->hs.too_large_413);
    cJSON_AddNumberToObject(o, "too_long_422", (double) srv->hs.too_long_422);
    cJSON_AddNumberToObject(o, "disconnects", (double) srv->hs.disconnects);
    cJSON_AddNumberToObject(o, "tool_calls", (double) srv->hs.tool_calls);
    cJSON_AddNumberToObject(o, "ttft_avg_ms", srv->hs.ttft_n
                            ? srv->hs.ttft_sum_s * 1e3 / (double) srv->hs.ttft_n : 0.0);
    cJSON_AddNumberToObject(o, "latency_avg_ms", srv->hs.latency_n
                            ? srv->hs.latency_sum_s * 1e3 / (double) srv->hs.latency_n : 0.0);

    if (srv->sched) {
        pic_sched_stats_get(srv->sched, &st);
        o = cJSON_AddObjectToObject(doc, "scheduler");
        cJSON_AddNumberToObject(o, "workers", st.workers);
        cJSON_AddNumberToObject(o, "threads_per_worker", st.threads);
        cJSON_AddNumberToObject(o, "max_batch", st.max_batch);
        cJSON_AddNumberToObject(o, "max_queue", st.max_queue);
        cJSON_AddNumberToObject(o, "running", st.running);
        cJSON_AddNumberToObject(o, "queued", st.queued);
        cJSON_AddNumberToObject(o, "submitted", (double) st.submitted);
        cJSON_AddNumberToObject(o, "rejected", (double) st.rejected);
        cJSON_AddNumberToObject(o, "completed", (double) st.completed);
        cJSON_AddNumberToObject(o, "cancelled", (double) st.cancelled);
        cJSON_AddNumberToObject(o, "expired", (double) st.expired);
        cJSON_AddNumberToObject(o, "failed", (double) st.failed);
        cJSON_AddNumberToObject(o, "prompt_tokens", (double) st.prompt_tokens);
        cJSON_AddNumberToObject(o, "generated_tokens", (double) st.gen_tokens);
        cJSON_AddNumberToObject(o, "cached_tokens", (double) st.cached_tokens);
        cJSON_AddNumberToObject(o, "prefill_steps", (double) st.prefill_steps);
        cJSON_AddNumberToObject(o, "decode_steps", (double) st.decode_steps);
        cJSON_AddNumberToObject(o, "decode_batches", (double) st.decode_batches);
        cJSON_AddNumberToObject(o, "rounds", (double) st.rounds);
        cJSON_AddNumberToObject(o, "busy_s", st.busy_s);
        cJSON_AddNumberToObject(o, "cancel_latency_max_ms", st.cancel_latency_max_ms);
    } else {
        cJSON_AddNullToObject(doc, "scheduler");
    }

    if (srv->pool) {
        pic_pool_stats ps;

        pic_pool_stats_get(srv->pool, &ps);
        o = cJSON_AddObjectToObject(doc, "cache");
        cJSON_AddStringToObject(o, "mode", srv->mode_name);
        pic_seam_json(o, "seam", srv->plan.seam.w, srv->plan.recompute);
        cJSON_AddStringToObject(o, "seam_source", srv->seam_source);
        pic_seam_json(o, "seam_doc", srv->plan.seam_doc.w, srv->plan.recompute_doc);
        cJSON_AddStringToObject(o, "seam_doc_source", srv->seam_doc_source);
        if (srv->calibration != NULL) {
            cJSON *c = cJSON_Duplicate(srv->calibration, 1);

            if (c != NULL) {
                cJSON_AddStringToObject(c, "file", srv->calibration_path);
                cJSON_AddItemToObject(o, "calibration", c);
            }
        }
        cJSON_AddStringToObject(o, "entry_dtype",
                                srv->plan.seam.dtype == PIC_DTYPE_BF16 ? "bf16" : "f32");
        cJSON_AddNumberToObject(o, "entries", (double) ps.items);
        cJSON_AddNumberToObject(o, "bytes", (double) ps.bytes);
        cJSON_AddNumberToObject(o, "budget", (double) ps.budget);
        cJSON_AddNumberToObject(o, "hits", (double) ps.hits);
        cJSON_AddNumberToObject(o, "misses", (double) ps.misses);
        cJSON_AddNumberToObject(o, "insertions", (double) ps.insertions);
        cJSON_AddNumberToObject(o, "evictions", (double) ps.evictions);
        cJSON_AddNumberToObject(o, "rejected", (double) ps.rejected);
        pic_status_capacity(srv, &ps, cJSON_AddObjectToObject(o, "capacity"));
        cJSON_AddNumberToObject(o, "plans_received", (double) srv->hs.plans_received);
        cJSON_AddNumberToObject(o, "plans_ignored", (double) srv->hs.plans_ignored);
        cJSON_AddNumberToObject(o, "peer_fetches", (double) srv->hs.peer_fetches);
        cJSON_AddNumberToObject(o, "peer_failures", (double) srv->hs.peer_failures);
        cJSON_AddNumberToObject(o, "peer_frames", (double) srv->hs.peer_frames);
        cJSON_AddNumberToObject(o, "segments_served", (double) srv->hs.segments_served);
        cJSON_AddNumberToObject(o, "prefills_served", (double) srv->hs.prefills_served);
        cJSON_AddBoolToObject(o, "pool_auth", srv->auth.len > 0);
        cJSON_AddBoolToObject(o, "pool_open", srv->auth.len == 0 && srv->opts->insecure_pool);
        cJSON_AddNumberToObject(o, "auth_failures", (double) srv->hs.auth_failures);
        if (srv->sched) {
            cJSON_AddNumberToObject(o, "plan_jobs", (double) st.plan_jobs);
            cJSON_AddNumberToObject(o, "segment_hits", (double) st.seg_hits);
            cJSON_AddNumberToObject(o, "segment_peer", (double) st.seg_peer);
            cJSON_AddNumberToObject(o, "segment_built", (double) st.seg_built);
            cJSON_AddNumberToObject(o, "segment_rejected", (double) st.seg_rejected);
            cJSON_AddNumberToObject(o, "segment_remote_failed", (double) st.seg_remote_failed);
            cJSON_AddNumberToObject(o, "cached_tokens", (double) st.cached_tokens);
            cJSON_AddNumberToObject(o, "exact_tokens", (double) st.exact_tokens);
            cJSON_AddNumberToObject(o, "pic_tokens", (double) st.pic_tokens);
            cJSON_AddNumberToObject(o, "recomputed_tokens", (double) st.recomputed_tokens);
            cJSON_AddNumberToObject(o, "sessions_kept", (double) st.sessions_kept);
            cJSON_AddNumberToObject(o, "frames_sent", (double) st.frames_sent);
            cJSON_AddNumberToObject(o, "plan_waits", (double) st.plan_waits);
            cJSON_AddNumberToObject(o, "assemble_s", st.assemble_s);
            cJSON_AddNumberToObject(o, "build_s", st.build_s);
        }
    }

    if (srv->prefix) {
        pic_prefix_stats px;

        pic_prefix_cache_stats_get(srv->prefix, &px);
        o = cJSON_AddObjectToObject(doc, "prefix");
        cJSON_AddNumberToObject(o, "lookups", (double) px.lookups);
        cJSON_AddNumberToObject(o, "hits", (double) px.hits);
        cJSON_AddNumberToObject(o, "tail_hits", (double) px.tail_hits);
        cJSON_AddNumberToObject(o, "tokens_reused", (double) px.tokens_reused);
        cJSON_AddNumberToObject(o, "tokens_skippable", (double) px.tokens_skippable);
        cJSON_AddNumberToObject(o, "blocks", (double) px.blocks);
        cJSON_AddNumberToObject(o, "checkpoints", (double) px.checkpoints);
        int n_edges, max_ck;
        pic_prefix_cache_edges(srv->prefix, &n_edges, &max_ck);
        cJSON_AddNumberToObject(o, "edges", n_edges);
        cJSON_AddNumberToObject(o, "checkpoints_per_edge", px.ck_per_edge);
        cJSON_AddNumberToObject(o, "max_checkpoints_on_an_edge", max_ck);
        cJSON_AddNumberToObject(o, "observations", (double) px.observations);
        cJSON_AddNumberToObject(o, "resolves", (double) px.resolves);
        cJSON_AddNumberToObject(o, "resolves_in_request", (double) px.resolves_in_request);
        cJSON_AddNumberToObject(o, "resolves_dropped", (double) px.resolves_dropped);
        cJSON_AddNumberToObject(o, "trims", (double) px.trims);
        cJSON_AddNumberToObject(o, "tails", (double) px.tails);
        cJSON_AddNumberToObject(o, "insertions", (double) px.insertions);
        cJSON_AddNumberToObject(o, "evictions", (double) px.evictions);
        cJSON_AddNumberToObject(o, "bytes", (double) px.bytes);
        pic_plan_later_stats ls;
        cJSON               *d;

        pic_plan_door_stats(&srv->door, &ls);
        d = cJSON_AddObjectToObject(o, "deferred_builds");
        cJSON_AddNumberToObject(d, "queued", (double) ls.queued);
        cJSON_AddNumberToObject(d, "built", (double) ls.built);
        cJSON_AddNumberToObject(d, "dropped", (double) ls.dropped);
        cJSON_AddNumberToObject(d, "pending", ls.pending);
        cJSON_AddNumberToObject(o, "budget", (double) px.budget);
        cJSON_AddNumberToObject(o, "spare_checkpoints", pic_prefix_cache_spares(srv->prefix));
        cJSON_AddNumberToObject(o, "spare_checkpoints_max", PIC_PREFIX_SPARES);
    }

    cJSON_AddItemToObject(doc, "requests_in_flight", pic_server_live_doc(srv));

    if (srv->pool) {
        size_t         kb = 0, cb = 0, tb = 0;
        pic_pool_stats ms;

        if (srv->prefix) {
            pic_prefix_cache_bytes(srv->prefix, &kb, &cb, &tb);
        }
        pic_pool_stats_get(srv->pool, &ms);
        o = cJSON_AddObjectToObject(doc, "memory");
        cJSON_AddNumberToObject(o, "budget", (double) srv->budget.budget);
        cJSON_AddStringToObject(o, "eviction", srv->budget.cost_aware ? "cost" : "lru");
        cJSON_AddNumberToObject(o, "bytes", (double) (ms.bytes + kb + cb + tb));
        cJSON_AddNumberToObject(o, "pic_entry_bytes", (double) ms.bytes);
        cJSON_AddNumberToObject(o, "prefix_kv_bytes", (double) kb);
        cJSON_AddNumberToObject(o, "checkpoint_bytes", (double) cb);
        cJSON_AddNumberToObject(o, "session_bytes", (double) tb);
        cJSON_AddNumberToObject(o, "evictions",
                                (double) __atomic_load_n(&srv->budget.cross_evictions,
                                                         __ATOMIC_RELAXED));
        cJSON_AddNumberToObject(o, "admission_refused",
                                (double) __atomic_load_n(&srv->budget.refused,
                                                         __ATOMIC_RELAXED));
    }

    if (srv->reg) {
        cJSON_AddItemToObject(doc, "registry", pic_registry_status(srv->reg));
    } else {
        o = cJSON_AddObjectToObject(doc, "registry");
        cJSON_AddBoolToObject(o, "enabled", 0);
    }
    pic_reply_json(req, 200, doc);
}

/* The TTFT histogram of /metrics (the gateway's buckets: pic_ttft_bucket). */
static void
pic_metrics_ttft(struct evbuffer *b, const pic_http_stats *hs)
{
    uint64_t cum = 0;
    int      i;

    evbuffer_add_printf(b, "# HELP pic_engine_ttft_milliseconds Submission to first "
                        "token of answered requests.\n"
                        "# TYPE pic_engine_ttft_milliseconds histogram\n");
    for (i = 0; i < PIC_TTFT_BUCKETS; i++) {
        cum += hs->ttft_hist[i];
        if (i < PIC_TTFT_BUCKETS - 1) {
            evbuffer_add_printf(b, "pic_engine_ttft_milliseconds_bucket{le=\"%llu\"} %llu\n",
                                (unsigned long long) pic_ttft_bounds_ms[i],
                                (unsigned long long) cum);
        } else {
            evbuffer_add_printf(b, "pic_engine_ttft_milliseconds_bucket{le=\"+Inf\"} %llu\n",
                                (unsigned long long) cum);
        }
    }
    evbuffer_add_printf(b, "pic_engine_ttft_milliseconds_sum %.3f\n"
                        "pic_engine_ttft_milliseconds_count %llu\n",
                        hs->ttft_sum_s * 1e3, (unsigned long long) hs->ttft_n);
}

void
pic_endpoint_metrics(pic_server *srv, struct evhttp_request *req)
{
    struct evbuffer *b = evbuffer_new();
    pic_sched_stats  st;

    if (b == NULL) {
        evhttp_send_error(req, 500, NULL);
        return;
    }
#define PIC_METRIC(name, type, help, fmt, val)                                 \
    evbuffer_add_printf(b, "# HELP " name " " help "\n# TYPE " name " " type "\n" \
                        name " " fmt "\n", val)
    PIC_METRIC("pic_engine_requests_total", "counter", "HTTP requests served.", "%llu",
               (unsigned long long) srv->hs.requests);
    PIC_METRIC("pic_engine_errors_total", "counter", "Requests answered with an error.",
               "%llu", (unsigned long long) srv->hs.errors);
    PIC_METRIC("pic_engine_uptime_seconds", "gauge", "Seconds since start.", "%ld",
               (long) (time(NULL) - srv->started));
    PIC_METRIC("pic_engine_completions_total", "counter",
               "Completion requests accepted.", "%llu",
               (unsigned long long) srv->hs.completions);
    PIC_METRIC("pic_engine_rejected_total", "counter",
               "Requests refused with 429 (queue full).", "%llu",
               (unsigned long long) srv->hs.rejected_429);
    PIC_METRIC("pic_engine_disconnects_total", "counter",
               "Clients gone before the end of their answer.", "%llu",
               (unsigned long long) srv->hs.disconnects);
    PIC_METRIC("pic_engine_in_flight", "gauge", "Requests in flight.", "%d", srv->n_live);
    PIC_METRIC("pic_engine_loading", "gauge", "1 while the model loads.", "%d",
               srv->loading);
    if (srv->loading) {
        pic_load_progress p;

        pic_load_progress_get(&srv->load, &p);
        PIC_METRIC("pic_engine_load_bytes_done", "gauge", "Tensor bytes loaded.", "%llu",
                   (unsigned long long) p.bytes_done);
        PIC_METRIC("pic_engine_load_bytes_total", "gauge", "Tensor bytes to load.", "%llu",
                   (unsigned long long) p.bytes_total);
        goto send;
    }
    if (srv->sched) {
        pic_sched_stats_get(srv->sched, &st);
        PIC_METRIC("pic_engine_running", "gauge", "Sequences computing.", "%d", st.running);
        PIC_METRIC("pic_engine_queued", "gauge", "Requests waiting.", "%d", st.queued);
        PIC_METRIC("pic_engine_prompt_tokens_total", "counter", "Prompt tokens.", "%llu",
                   (unsigned long long) st.prompt_tokens);
        PIC_METRIC("pic_engine_generated_tokens_total", "counter", "Generated tokens.",
                   "%llu", (unsigned long long) st.gen_tokens);
        PIC_METRIC("pic_engine_cached_tokens_total", "counter",
                   "Prompt tokens served from a cache.", "%llu",
                   (unsigned long long) st.cached_tokens);
        evbuffer_add_printf(b, "# HELP pic_engine_plan_tokens_total Prompt tokens of "
                            "plan jobs (prompts assembled from segments) by source.\n"
                            "# TYPE pic_engine_plan_tokens_total counter\n"
                            "pic_engine_plan_tokens_total{source=\"exact\"} %llu\n"
                            "pic_engine_plan_tokens_total{source=\"pic\"} %llu\n"
                            "pic_engine_plan_tokens_total{source=\"recomputed\"} %llu\n",
                            (unsigned long long) st.exact_tokens,
                            (unsigned long long) st.pic_tokens,
                            (unsigned long long) st.recomputed_tokens);
        PIC_METRIC("pic_engine_cancelled_total", "counter", "Jobs cancelled.", "%llu",
                   (unsigned long long) st.cancelled);
        PIC_METRIC("pic_engine_expired_total", "counter", "Jobs past their deadline.",
                   "%llu", (unsigned long long) st.expired);
        PIC_METRIC("pic_engine_busy_seconds_total", "counter",
                   "Seconds the workers spent computing.", "%.3f", st.busy_s);
        PIC_METRIC("pic_engine_segment_hits_total", "counter",
                   "Segments served from the local pool.", "%llu",
                   (unsigned long long) st.seg_hits);
        PIC_METRIC("pic_engine_segment_built_total", "counter",
                   "Segment entries built here.", "%llu", (unsigned long long) st.seg_built);
        PIC_METRIC("pic_engine_segment_peer_total", "counter",
                   "Segment entries received from peers.", "%llu",
                   (unsigned long long) st.seg_peer);
    }
    PIC_METRIC("pic_engine_peer_failures_total", "counter",
               "Pulls and remote prefills that failed (computed here instead).", "%llu",
               (unsigned long long) srv->hs.peer_failures);
    pic_metrics_ttft(b, &srv->hs);
    if (srv->pool) {
        pic_pool_stats ps;

        pic_pool_stats_get(srv->pool, &ps);
        PIC_METRIC("pic_engine_pool_bytes", "gauge", "Bytes held by the public pool.", "%zu",
                   ps.bytes);
        PIC_METRIC("pic_engine_pool_entries", "gauge", "Entries in the public pool.", "%zu",
                   ps.items);
        PIC_METRIC("pic_engine_pool_evictions_total", "counter", "Entries evicted.", "%llu",
                   (unsigned long long) ps.evictions);
    }
    if (srv->reg) {
        PIC_METRIC("pic_engine_registry_up", "gauge", "1 while Redis answers.", "%d",
                   pic_registry_connected(srv->reg));
        PIC_METRIC("pic_engine_registry_segments", "gauge",
                   "Segments registered in the index.", "%zu",
                   pic_registry_seg_count(srv->reg));
    }
send:
#undef PIC_METRIC
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "text/plain; version=0.0.4; charset=utf-8");
    evhttp_send_reply(req, 200, NULL, b);
    evbuffer_free(b);
}

