/*
 * cmd_generate.c — placeholder until the owning change lands (see the open issue).
 */
#include <stdio.h>

#include "commands.h"

int
pic_cmd_generate(int argc, char **argv)
{
    fprintf(stderr, "pic-engine generate: not built yet\n");
    return 2;
}
