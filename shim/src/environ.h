/* The program sees its own environment, not the one it was started with. */
#ifndef FERRY_ENVIRON_H
#define FERRY_ENVIRON_H

/* Take the FERRY_* entries out of `envp` (in place) and give LD_PRELOAD and
 * LD_LIBRARY_PATH back the values recorded in their FERRY_WAS_* markers. */
void ferry_environ_restore(char **envp);

#endif
