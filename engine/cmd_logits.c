/*
 * cmd_logits.c — placeholder until the owning change lands (see the open issue).
 */
#include <stdio.h>

#include "commands.h"

int
pic_cmd_logits(int argc, char **argv)
{
    fprintf(stderr, "pic-engine logits: not built yet\n");
    return 2;
}
