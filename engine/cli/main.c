/*
 * main.c — pic-engine entry point: dispatch to a subcommand.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "pic_kernels.h"
#include "pic_buf.h"

typedef struct {
    const char *name;
    int       (*run)(int argc, char **argv);
    const char *help;
} pic_command;

static const pic_command commands[] = {
    { "serve",    pic_cmd_serve,    "run the HTTP server (OpenAI API, /healthz, /status)" },
    { "generate", pic_cmd_generate, "generate text from --prompt or --chat" },
    { "logits",   pic_cmd_logits,   "write float32 logits [tokens x vocab] for --tokens" },
    { "tokenize", pic_cmd_tokenize, "print token ids for a text" },
    { "calibrate", pic_cmd_calibrate, "choose the seam width from its drift on sample requests" },
    { "sysinfo",  pic_cmd_sysinfo,  "measure sgemm GFLOP/s and memcpy GB/s (JSON)" },
    { "gguf",     pic_cmd_gguf,     "print a GGUF file's metadata and tensors (JSON)" },
};

int
pic_cli_parse_ids(const char *s, int **ids, int *n)
{
    int    *a = NULL;
    size_t  cap = 0, cnt = 0;

    while (*s) {
        char *end;
        long  v;

        errno = 0;
        v = strtol(s, &end, 10);
        if (end == s || errno != 0 || v < 0 || v > 0x7fffffff
            || (*end != ',' && *end != '\0')
            || cnt == 0x7fffffff
            || pic_grow((void **) &a, &cap, cnt + 1, sizeof(*a)) != 0) {
            free(a);
            return -1;
        }
        a[cnt++] = (int) v;
        s = *end == ',' ? end + 1 : end;
    }
    if (cnt == 0) {
        return -1;
    }
    *ids = a;
    *n = (int) cnt;
    return 0;
}

static void
usage(FILE *f)
{
    size_t i;

    fprintf(f, "usage: pic-engine COMMAND [options]   (COMMAND --help for options)\n\n");
    for (i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
    }
}

int
main(int argc, char **argv)
{
    size_t i;

    pic_kernels_process_env(argv);

    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (!strcmp(argv[1], commands[i].name)) {
            return commands[i].run(argc - 1, argv + 1);
        }
    }
    fprintf(stderr, "pic-engine: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
