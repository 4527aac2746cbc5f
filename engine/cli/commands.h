/*
 * commands.h — pic-engine subcommands; each lives in engine/cli/cmd_<name>.c and
 * returns a process exit status.
 */
#ifndef PIC_COMMANDS_H
#define PIC_COMMANDS_H

int pic_cmd_serve(int argc, char **argv);     /* HTTP server (cmd_serve.c) */
int pic_cmd_generate(int argc, char **argv);  /* stream a completion (cmd_generate.c) */
int pic_cmd_logits(int argc, char **argv);    /* raw float32 logits (cmd_logits.c) */
int pic_cmd_tokenize(int argc, char **argv);  /* ids for a text (cmd_tokenize.c) */
int pic_cmd_sysinfo(int argc, char **argv);
int pic_cmd_gguf(int argc, char **argv);
int pic_cmd_calibrate(int argc, char **argv); /* seam width from drift (cmd_calibrate.c) */   /* sgemm / memcpy rooflines (cmd_sysinfo.c) */

/* Parses "1,2,3" (token ids in [0, 2^31)) into a malloc'ed array; 0, or -1
 * on an empty or malformed list (nothing allocated then). */
int pic_cli_parse_ids(const char *s, int **ids, int *n);

#endif
