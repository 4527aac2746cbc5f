/*
 * cmd_tokenize.c — placeholder until the owning change lands (see the open issue).
 */
#include <stdio.h>

#include "commands.h"

int
pic_cmd_tokenize(int argc, char **argv)
{
    fprintf(stderr, "pic-engine tokenize: not built yet\n");
    return 2;
}
