/*
 * server.h — pic-engine's HTTP server (libevent evhttp).
 */
#ifndef PIC_SERVER_H
#define PIC_SERVER_H

#include <stdint.h>

typedef struct {
    const char *host;           /* listen address (IP), default 127.0.0.1 */
    int         port;           /* listen port; 0 picks a free one */
    const char *id;             /* engine id announced in /status and Redis */
    const char *model_dir;      /* checkpoint directory, NULL: none loaded */
    const char *port_file;      /* write the bound port here when set */
    int         threads;        /* compute threads */
} pic_server_opts;

/* Run the server until SIGINT/SIGTERM; returns a process exit status. */
int pic_server_run(const pic_server_opts *opts);

#endif
