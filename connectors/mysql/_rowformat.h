/* Text of MySQL's binary TIMESTAMP2, DATETIME2 and DECIMAL values, as binformats.py formats
 * them; included by _rowimage.c (it needs Col and call1 from there). */
#ifndef DBLOG_ROWFORMAT_H
#define DBLOG_ROWFORMAT_H

static uint64_t big(const unsigned char *p, int width) {
    uint64_t value = 0;
    for (int b = 0; b < width; b++)
        value = value << 8 | p[b];
    return value;
}

static int decimal_size(int precision, int scale) {
    int integral = precision - scale;
    return DECIMAL_BYTES[integral % 9] + 4 * (integral / 9 + scale / 9) + DECIMAL_BYTES[scale % 9];
}

static long long floor_div(long long x, long long y) {
    long long q = x / y;
    return (x % y != 0 && (x < 0) != (y < 0)) ? q - 1 : q;
}

/* days since 1970-01-01 to a civil date (H. Hinnant's days_from_civil, inverted) */
static void civil(long long days, long long *year, int *month, int *day) {
    long long z = days + 719468, era = floor_div(z, 146097);
    long long doe = z - era * 146097;
    long long yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    long long doy = doe - (365 * yoe + yoe / 4 - yoe / 100), mp = (5 * doy + 2) / 153;
    *day = (int)(doy - (153 * mp + 2) / 5 + 1);
    *month = (int)(mp < 10 ? mp + 3 : mp - 9);
    *year = yoe + era * 400 + (*month <= 2);
}

static PyObject *date_time_text(long long year, int month, int day, long long hour,
                                long long minute, long long second, long long micros) {
    char text[96];
    int n = snprintf(text, sizeof text, "%04lld-%02d-%02d %02lld:%02lld:%02lld", year, month,
                     day, hour, minute, second);
    if (micros)
        n += snprintf(text + n, sizeof text - n, ".%06lld", micros);
    return PyUnicode_FromStringAndSize(text, n);
}

static long long fraction_scale(int size) {
    long long scale = 1;
    for (int i = 0; i < 6 - 2 * size; i++)
        scale *= 10;
    return size ? scale : 0;
}

static PyObject *read_timestamp(const unsigned char *p, int fsp) {
    int size = FRACTION_BYTES[fsp];
    uint64_t packed = big(p, 4 + size);
    if (!packed)
        Py_RETURN_NONE; /* the zero TIMESTAMP */
    long long seconds = (long long)(packed >> 8 * size);
    long long micros = (long long)(packed & (((uint64_t)1 << 8 * size) - 1)) * fraction_scale(size);
    long long year, rest = seconds % 86400;
    int month, day;
    civil(seconds / 86400, &year, &month, &day);
    return date_time_text(year, month, day, rest / 3600, rest / 60 % 60, rest % 60, micros);
}

static PyObject *read_datetime(const unsigned char *p, int fsp) {
    int size = FRACTION_BYTES[fsp];
    long long packed = (long long)big(p, 5) - 0x8000000000LL;
    long long micros = size ? (long long)big(p + 5, size) * fraction_scale(size) : 0;
    long long ymd = floor_div(packed, 1LL << 17), hms = (long long)((uint64_t)packed & 0x1FFFF);
    long long year_month = floor_div(ymd, 32);
    long long year = floor_div(year_month, 13), month = year_month - 13 * year;
    long long day = (long long)((uint64_t)ymd & 31);
    if (year == 0 || month == 0 || day == 0)
        Py_RETURN_NONE; /* no ISO form (see types.py) */
    return date_time_text(year, (int)month, (int)day, hms >> 12, hms >> 6 & 63, hms & 63,
                          micros);
}

/* Appends one digit group; returns 0 when the group is over its range (no valid decimal). */
static int put_group(char **out, uint64_t group, int digits, int padded) {
    uint64_t limit = 1;
    for (int i = 0; i < digits; i++)
        limit *= 10;
    if (group >= limit)
        return 0;
    *out += padded ? sprintf(*out, "%0*llu", digits, (unsigned long long)group)
                   : sprintf(*out, "%llu", (unsigned long long)group);
    return 1;
}

static int decimal_text(const unsigned char *bytes, int precision, int scale, char *out) {
    int integral = precision - scale, lead = DECIMAL_BYTES[integral % 9];
    int tail_bytes = DECIMAL_BYTES[scale % 9], pos = 0, ok = 1;
    char whole[80], *w = whole, *o = out;
    if (lead)
        ok &= put_group(&w, big(bytes, lead), integral % 9, 0);
    for (pos = lead; ok && pos < lead + 4 * (integral / 9); pos += 4)
        ok &= put_group(&w, big(bytes + pos, 4), 9, 1);
    const char *digits = whole;
    while (*digits == '0' && digits + 1 < w)
        digits++;
    o += sprintf(o, "%s", w == whole ? "0" : digits);
    if (scale) {
        *o++ = '.';
        for (; ok && pos + 4 <= lead + 4 * (integral / 9 + scale / 9); pos += 4)
            ok &= put_group(&o, big(bytes + pos, 4), 9, 1);
        if (ok && tail_bytes)
            ok &= put_group(&o, big(bytes + pos, tail_bytes), scale % 9, 1);
    }
    return ok;
}

static PyObject *read_decimal(Col *col, const unsigned char *p) {
    unsigned char bytes[40];
    char text[96];
    memcpy(bytes, p, col->width);
    bytes[0] ^= 0x80;
    int negative = bytes[0] & 0x80; /* the stored sign bit was 0 */
    for (int i = 0; negative && i < col->width; i++)
        bytes[i] ^= 0xFF;
    if (!decimal_text(bytes, col->a, col->b, text + 1)) {
        PyObject *raw = PyBytes_FromStringAndSize((const char *)p, col->width);
        PyObject *value = raw ? call1(col->convert, raw) : NULL;
        Py_XDECREF(raw);
        return value;
    }
    const char *body = text + 1;
    int zero = strspn(body, "0.") == strlen(body);
    if (negative && !zero) {
        text[0] = '-';
        body = text;
    }
    return PyUnicode_FromString(body);
}

#endif
