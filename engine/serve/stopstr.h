/*
 * stopstr.h — stop strings over streamed text: how much of what has been
 * generated may be shown now, and whether a stop string has appeared.
 */
#ifndef PIC_STOPSTR_H
#define PIC_STOPSTR_H

#include <stddef.h>

/* buf (len bytes) is text not yet shown.  Returns how many leading bytes
 * may be shown: up to the earliest occurrence of a stop string (*matched =
 * 1; the stop string itself is never shown), or, without one, all but the
 * longest tail that is a proper prefix of some stop string (*matched = 0).
 * Empty stop strings are ignored. */
size_t pic_stop_scan(const char *buf, size_t len, const char *const *stops,
                     int n_stops, int *matched);

#endif /* PIC_STOPSTR_H */
