"""A plain, slow restatement of the best-fit packing rule, to check the real packer against."""


def pack_rows(doc_batches, row_len, row_count, buffer_size=1000):
    """Rows packed from batches of docs (lists of token ids, BOS first); None if docs run out.

    The buffer is topped up a whole batch at a time whenever it holds fewer than buffer_size docs.
    """
    stream = iter(doc_batches)
    buffer = []
    rows = []
    for _ in range(row_count):
        row = []
        while len(row) < row_len:
            while len(buffer) < buffer_size:
                batch = next(stream, None)
                if batch is None:
                    break
                buffer.extend(batch)
            if not buffer:
                return None
            remaining = row_len - len(row)
            best = None
            for i, doc in enumerate(buffer):
                if len(doc) <= remaining and (best is None or len(doc) > len(buffer[best])):
                    best = i
            if best is not None:
                row.extend(buffer.pop(best))
            else:
                shortest = min(range(len(buffer)), key=lambda i: len(buffer[i]))
                row.extend(buffer.pop(shortest)[:remaining])
        rows.append(row)
    return rows
