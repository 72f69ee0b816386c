class __rlm_mod_heapq_t:
    def heappush(self, heap, item):
        heap.append(item)
        heap.sort()
    def heappop(self, heap):
        return heap.pop(0)
    def heapify(self, x):
        x.sort()
    def heappushpop(self, heap, item):
        heap.append(item)
        heap.sort()
        return heap.pop(0)
    def nlargest(self, n, iterable, key=None):
        return sorted(iterable, key=key, reverse=True)[:n]
    def nsmallest(self, n, iterable, key=None):
        return sorted(iterable, key=key)[:n]
__rlm_mod_heapq = __rlm_mod_heapq_t()
class __rlm_mod_statistics_t:
    def mean(self, data):
        d = list(data)
        if not d:
            raise ValueError('mean requires at least one data point')
        total = sum(d)
        if all(isinstance(x, int) for x in d) and total % len(d) == 0:
            return total // len(d)
        return total / len(d)
    def fmean(self, data):
        d = list(data)
        return sum(d) / len(d)
    def median(self, data):
        d = sorted(data)
        n = len(d)
        if n == 0:
            raise ValueError('no median for empty data')
        m = n // 2
        if n % 2:
            return d[m]
        return (d[m - 1] + d[m]) / 2
    def mode(self, data):
        counts = {}
        best = None
        for x in data:
            counts[x] = counts.get(x, 0) + 1
            if best is None or counts[x] > counts[best]:
                best = x
        return best
    def pvariance(self, data):
        d = list(data)
        mu = sum(d) / len(d)
        return sum((x - mu) ** 2 for x in d) / len(d)
    def variance(self, data):
        d = list(data)
        mu = sum(d) / len(d)
        return sum((x - mu) ** 2 for x in d) / (len(d) - 1)
    def pstdev(self, data):
        return self.pvariance(data) ** 0.5
    def stdev(self, data):
        return self.variance(data) ** 0.5
__rlm_mod_statistics = __rlm_mod_statistics_t()
class __rlm_mod_string_t:
    ascii_lowercase = 'abcdefghijklmnopqrstuvwxyz'
    ascii_uppercase = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ'
    ascii_letters = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ'
    digits = '0123456789'
    hexdigits = '0123456789abcdefABCDEF'
    octdigits = '01234567'
    punctuation = '!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~'
    whitespace = ' \t\n\r\x0b\x0c'
    def capwords(self, s, sep=None):
        return (sep or ' ').join(w.capitalize() for w in s.split(sep))
__rlm_mod_string = __rlm_mod_string_t()
class __rlm_mod_textwrap_t:
    def wrap(self, text, width=70):
        lines = []
        cur = ''
        for w in text.split():
            if cur and len(cur) + 1 + len(w) > width:
                lines.append(cur)
                cur = w
            elif cur:
                cur = cur + ' ' + w
            else:
                cur = w
        if cur:
            lines.append(cur)
        return lines
    def fill(self, text, width=70):
        return '\n'.join(self.wrap(text, width))
    def shorten(self, text, width, placeholder=' [...]'):
        t = ' '.join(text.split())
        if len(t) <= width:
            return t
        out = ''
        for w in t.split(' '):
            cand = out + ' ' + w if out else w
            if len(cand) + len(placeholder) > width:
                break
            out = cand
        return out + placeholder
    def dedent(self, text):
        lines = text.split('\n')
        margins = [len(l) - len(l.lstrip()) for l in lines if l.strip()]
        m = min(margins) if margins else 0
        return '\n'.join(l[m:] if l.strip() else '' for l in lines)
    def indent(self, text, prefix):
        return '\n'.join(prefix + l if l.strip() else l for l in text.split('\n'))
__rlm_mod_textwrap = __rlm_mod_textwrap_t()
class __rlm_mod_operator_t:
    def itemgetter(self, *items):
        if len(items) == 1:
            k = items[0]
            return lambda o: o[k]
        return lambda o: tuple(o[i] for i in items)
    def add(self, a, b):
        return a + b
    def sub(self, a, b):
        return a - b
    def mul(self, a, b):
        return a * b
    def truediv(self, a, b):
        return a / b
    def neg(self, a):
        return -a
__rlm_mod_operator = __rlm_mod_operator_t()
