/* The qhx program: everything else of the command line is in a library the fuzzers link too. */
#include "cli.h"

int main(int argc, char **argv) { return qhx_main(argc, argv); }
