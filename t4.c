#include <stdio.h>
#include <unistd.h>
int main(void) { sleep(1); printf("ok\n"); return 0; }
