#include "cli.h"
int cmd_chat(int argc, char **argv) { return die("not yet"); }
