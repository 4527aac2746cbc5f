/*
 * cmd_serve.c — `pic-engine serve`: parse options, run the HTTP server.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "server.h"

static void
serve_usage(FILE *f)
{
    fprintf(f,
            "usage: pic-engine serve [--model DIR] [--host IP] [--port N] [--id NAME]\n"
            "                        [--port-file PATH] [--threads N]\n"
            "  --host IP         listen address (default 127.0.0.1)\n"
            "  --port N          listen port (default 8000; 0 picks a free port)\n"
            "  --id NAME         engine id for status and the index (default engine-PORT)\n"
            "  --port-file PATH  write the bound port to PATH once listening\n");
}

int
pic_cmd_serve(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "model", required_argument, NULL, 'm' },
        { "host", required_argument, NULL, 'H' },
        { "port", required_argument, NULL, 'p' },
        { "id", required_argument, NULL, 'i' },
        { "port-file", required_argument, NULL, 'f' },
        { "threads", required_argument, NULL, 't' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    pic_server_opts opts = { .host = "127.0.0.1", .port = 8000, .threads = 0 };
    char            idbuf[64];
    char           *end;
    long            v;
    int             c;

    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'm': opts.model_dir = optarg; break;
        case 'H': opts.host = optarg; break;
        case 'i': opts.id = optarg; break;
        case 'f': opts.port_file = optarg; break;
        case 'p':
        case 't':
            v = strtol(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || v < 0 || v > 65535) {
                fprintf(stderr, "pic-engine serve: invalid number '%s'\n", optarg);
                return 2;
            }
            if (c == 'p') {
                opts.port = (int) v;
            } else {
                opts.threads = (int) v;
            }
            break;
        case 'h': serve_usage(stdout); return 0;
        default: serve_usage(stderr); return 2;
        }
    }
    if (opts.id == NULL) {
        snprintf(idbuf, sizeof(idbuf), "engine-%d", opts.port);
        opts.id = idbuf;
    }
    return pic_server_run(&opts);
}
