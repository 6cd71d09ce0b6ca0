/* placeholder replaced below */
#include <stdio.h>
#include "sheaf.h"
int main(void) { printf("sheaf %s\n", sheaf_version()); return 0; }
