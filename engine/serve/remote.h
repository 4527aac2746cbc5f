/*
 * remote.h — the entries one request fetches from peers (remote.c): pulls
 * from holders and remote prefills on workers, for the segments of its
 * gateway plan.
 */
#ifndef PIC_REMOTE_H
#define PIC_REMOTE_H

#include "pic_plan.h"
#include "server_state.h"

typedef struct pic_fetch pic_fetch;

/* A request's fetches: its server, its job (whose plan segments the
 * frames land in) and the fetches under way. */
typedef struct {
    pic_server *srv;
    pic_job    *job;
    pic_fetch  *fetches;
} pic_remote;

/* Start fetching the plan's segments of r->job from holders and workers
 * (loop thread; before the job is submitted). */
void pic_remote_dispatch(pic_remote *r, const pic_plan *plan);

/* Cancel r's fetches (before its job is freed). */
void pic_remote_cancel(pic_remote *r);

#endif /* PIC_REMOTE_H */
