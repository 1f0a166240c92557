-- containers.lua: record containers. A record container is ONE key per timeline, in one
-- of two encodings:
--   inline  cmsgpack(meta, id1, ts1, payload1, id2, ...) while the timeline is small
--           (few records, at most INLINE_MAX_BYTES stored): from two records on a
--           list (library 33), the meta then one element per entry, the same bytes; a
--           meta alone or with one record one string (a string with more is what a
--           library up to 32 wrote). New records are pushed to a list without reading
--           the ones stored (push_entries): an append costs what it adds. An id
--           appended again supersedes its earlier entry (the last one wins); the next
--           rewrite (general path, open) drops it. A list's meta keeps the count it was
--           written with: its elements are the count (list_meta), and a list is read
--           element by element (decode_list);
--   hash    field id -> struct.pack('>d', ts) .. payload, meta under field ""
--           once it grows: one hash entry per record, updated in place.
-- Ordering is computed only when a digest is opened or capacity trims, so no
-- per-record index (sorted set) is kept at all; large sets of records are ordered by
-- Redis itself in the scratch zset, never by a Lua comparator.
-- This part reads them (container_writes.lua writes them).
-- Holds: META, INLINE_MAX_BYTES, HEAD_READ, container_kind, pack_values, unpack_all,
--   decode_inline, without_superseded, encode_inline, read_container,
--   list_meta, decode_list, inline_head, read_meta, HEAD_READ_FIRST, HEAD_READ_LAST,
--   prefix_head, read_head, inline_blob, inline_contents, record_count, hash_record_count,
--   holds_no_records, held_count.
-- Needs: invalid_state (guards); decode_field, format_timeline_meta, parse_timeline_meta
--   (encoding); UNPACK_CHUNK (helpers).

-- The meta field name: record ids must be non-empty, so "" never collides.
local META = ''
-- A container stays inline while its value is at most this many bytes long; past it (or
-- past the caller's record limit) it becomes a hash. Reading it whole (an open, a trim, a
-- cancel) costs Lua a hash over every byte (Redis's Lua hashes whole strings), so it stays
-- small.
local INLINE_MAX_BYTES = 8192
-- Bytes read from the front of an inline container to find its meta (read_head with
-- prefix_only): a timeline meta fits (a longer head is read whole).
local HEAD_READ = 64

-- read_container(key[, kind]) -> {kind = 'none'|'inline'|'hash', meta = raw string|nil,
--     records = {{id, timestamp, payload}...}, damaged = {ids of unreadable hash fields},
--     damaged_count = unreadable records of either encoding (inline ones have no id)}

-- (the second value: true for an inline container stored as a list)
local function container_kind(key)
    local kind = redis.call('TYPE', key).ok
    if kind == 'string' or kind == 'list' then
        return 'inline', kind == 'list'
    elseif kind == 'hash' or kind == 'none' then
        return kind
    end
    invalid_state('unexpected ' .. kind .. ' at ' .. key)
end

local function pack_values(...)
    return {n = select('#', ...), ...}
end

-- Every value of a msgpack string, values[2..n] (values[1]: unpack_limit's offset), read
-- UNPACK_CHUNK at a time: each value is a Lua stack slot of the call that returns it, and a
-- leading digest holds 3 per record of a whole first batch (cmsgpack.unpack of 10,000
-- records overflowed the stack: "too many results to unpack").
local function unpack_all(blob)
    local values = pack_values(cmsgpack.unpack_limit(blob, UNPACK_CHUNK, 0))
    local offset, n = values[1], values.n
    while offset >= 0 do
        local more = pack_values(cmsgpack.unpack_limit(blob, UNPACK_CHUNK, offset))
        offset = more[1]
        for i = 2, more.n do
            values[n + i - 1] = more[i]
        end
        n = n + more.n - 1
    end
    values.n = n
    return values
end

-- Returns the meta, the records, how many entries were unreadable and how many an entry
-- of the same id later in the value superseded: the later one is the record (at the
-- earlier one's place), as if it had overwritten it (push_entries pushes it instead).
-- `values`: the blob's values as unpack_all reads them (values[2]: the meta; then id,
-- timestamp, payload per entry, up to values.n), made by the caller instead (a list's).
local function decode_inline(blob, values)
    local records, damaged, superseded = {}, 0, 0
    if values == nil then
        local ok
        ok, values = pcall(unpack_all, blob)
        if not ok or type(values[2]) ~= 'string' then
            -- Unreadable as a whole: nothing can be recovered or counted.
            return nil, records, damaged, superseded
        end
    end
    local position = {}
    for i = 3, values.n, 3 do
        local id, timestamp, payload = values[i], values[i + 1], values[i + 2]
        if type(id) == 'string' and #id > 0 and type(timestamp) == 'number'
                and type(payload) == 'string' then
            local record = {id = id, timestamp = timestamp, payload = payload}
            local index = position[id]
            if index == nil then
                records[#records + 1] = record
                position[id] = #records
            else
                records[index] = record
                superseded = superseded + 1
            end
        else
            damaged = damaged + 1
        end
    end
    return values[2], records, damaged, superseded
end

-- A timeline meta whose written count leaves out `superseded` entries (decode_inline):
-- what it says once the container is rewritten without them.
local function without_superseded(raw, superseded)
    if superseded == 0 then
        return raw
    end
    local meta = parse_timeline_meta(raw)
    meta.written = math.max(0, meta.written - superseded)
    return format_timeline_meta(meta)
end

-- A list container's meta (its first element, `raw`) with the count its `entries` say: the
-- append does not rewrite the meta (containers.lua's head).
local function list_meta(raw, entries)
    local meta = parse_timeline_meta(raw)
    meta.written = entries
    return format_timeline_meta(meta)
end

-- cmsgpack.pack(meta, id1, ts1, payload1, ...), packed UNPACK_CHUNK values at a time: the
-- values of one pack are the arguments of a call (and pack needs as many slots again), which
-- a leading digest of a whole first batch outgrew (1,334 records: "Too many arguments for
-- MessagePack pack"). The packs of consecutive values joined are the pack of them all.
local function encode_inline(meta, records)
    local values = {meta}
    for _, record in ipairs(records) do
        values[#values + 1] = record.id
        values[#values + 1] = record.timestamp
        values[#values + 1] = record.payload
    end
    local count = #values
    if count <= UNPACK_CHUNK then
        return cmsgpack.pack(unpack(values))
    end
    local parts = {}
    for first = 1, count, UNPACK_CHUNK do
        parts[#parts + 1] = cmsgpack.pack(unpack(values, first,
            math.min(first + UNPACK_CHUNK - 1, count)))
    end
    return table.concat(parts)
end

-- A list container decoded as decode_inline decodes a string: each element unpacked on its
-- own (joined, its bytes would be made into a Lua string once more), the meta with its
-- count (list_meta).
local function decode_list(key)
    local elements = redis.call('LRANGE', key, '0', '-1')
    local values, n = {0, list_meta(elements[1], #elements - 1)}, 2
    for i = 2, #elements do
        local ok, id, timestamp, payload = pcall(cmsgpack.unpack, elements[i])
        if not ok then
            id, timestamp, payload = nil, nil, nil -- counted as damaged
        end
        values[n + 1], values[n + 2], values[n + 3] = id, timestamp, payload
        n = n + 3
    end
    values.n = n
    return decode_inline(nil, values)
end

local function read_container(key, known_kind)
    local kind, list = known_kind, false
    if kind == nil then
        kind, list = container_kind(key)
    end
    if kind == 'none' then
        return {kind = kind, records = {}, damaged = {}, damaged_count = 0}
    elseif kind == 'inline' then
        local meta, records, damaged, superseded
        if list then
            meta, records, damaged, superseded = decode_list(key)
        else
            meta, records, damaged, superseded = decode_inline(redis.call('GET', key))
        end
        -- an inline record has no field to delete: it is only counted; the meta counts the
        -- records as held, superseded entries left out (every caller rewrites without them)
        return {kind = kind, meta = meta and without_superseded(meta, superseded),
            records = records, damaged = {}, damaged_count = damaged}
    end
    local flat = redis.call('HGETALL', key)
    local container = {kind = kind, records = {}, damaged = {}}
    for i = 1, #flat, 2 do
        local id = flat[i]
        if id == META then
            container.meta = flat[i + 1]
        else
            local timestamp, payload = decode_field(flat[i + 1])
            if timestamp == nil then
                table.insert(container.damaged, id)
            else
                table.insert(container.records, {id = id, timestamp = timestamp, payload = payload})
            end
        end
    end
    container.damaged_count = #container.damaged
    return container
end

-- The meta at the head of an inline blob, and the position its records start at,
-- read without decoding the records: the meta is the blob's first msgpack value,
-- a string. nil when the head is not a readable string.
local function inline_head(blob)
    local first = string.byte(blob, 1)
    local length, start
    if first == nil then
        return nil
    elseif first >= 0xa0 and first <= 0xbf then
        length, start = first - 0xa0, 2
    elseif first == 0xd9 then
        length, start = string.byte(blob, 2), 3
    elseif first == 0xda then
        local high, low = string.byte(blob, 2, 3)
        if low == nil then
            return nil
        end
        length, start = high * 256 + low, 4
    else
        return nil
    end
    if length == nil or start + length - 1 > #blob then
        return nil
    end
    return string.sub(blob, start, start + length - 1), start + length
end

-- Only the meta, without decoding the records.
local function read_meta(key)
    local kind, list = container_kind(key)
    if kind == 'hash' then
        local raw = redis.call('HGET', key, META)
        return raw ~= false and raw or nil
    elseif list then
        return list_meta(redis.call('LINDEX', key, '0'), redis.call('LLEN', key) - 1)
    elseif kind == 'inline' then
        return (inline_head(redis.call('GET', key)))
    end
    return nil
end

-- GETRANGE's arguments for the first HEAD_READ bytes, as the text Redis reads (a number
-- argument of redis.call is formatted, %.17g, on every call). Literals: the library's load
-- cannot call string functions.
local HEAD_READ_FIRST, HEAD_READ_LAST = '0', '63'

-- read_head's prefix_only read, without asking the container's TYPE first (one command per
-- timeline of an add, not two): GETRANGE answers a string's first bytes, "" for a missing
-- key (or an empty string) and an error for any other type, for which HGET answers a
-- hash's meta. nil: neither a non-empty string nor a hash, for read_head to tell which.
local function prefix_head(key)
    local prefix = redis.pcall('GETRANGE', key, HEAD_READ_FIRST, HEAD_READ_LAST)
    if type(prefix) ~= 'string' then
        local raw = redis.pcall('HGET', key, META)
        if type(raw) == 'table' then
            -- a list (an inline container since library 33): its meta as stored, the count in
            -- it not the list's (nothing reads it: an append pushes and is answered the
            -- count, push_entries; the general path decodes, decode_list)
            raw = redis.pcall('LINDEX', key, HEAD_READ_FIRST)
            if type(raw) ~= 'string' then
                return nil -- not a list either: container_kind refuses it
            end
            return {kind = 'inline', list = true, meta = raw}
        end
        return {kind = 'hash', meta = raw ~= false and raw or nil}
    elseif prefix == '' then
        return nil
    end
    local meta, start = inline_head(prefix)
    -- made whole at once: a field set later may make Lua grow (rehash) the table
    local head = {kind = 'inline', meta = meta, start = start}
    if #prefix < HEAD_READ then
        head.blob = prefix -- that was all of it
    elseif head.meta == nil then
        -- a longer head (or an unreadable one): read it whole
        head.blob = redis.call('GET', key)
        head.meta, head.start = inline_head(head.blob)
    end
    return head
end

-- A container's kind and raw meta, plus an inline one's blob and the position its
-- records start at (nil for an unreadable head), without decoding the records: read
-- once by the function that then writes the container, so no later step reads again.
-- prefix_only: an inline string's first HEAD_READ bytes only (blob: nil unless that was
-- all of it), a list's meta, for an add, which pushes to a list without reading its records.
local function read_head(key, prefix_only)
    local head = prefix_only and prefix_head(key)
    if head then
        return head
    end
    local list
    head = {}
    head.kind, list = container_kind(key)
    if head.kind == 'hash' then
        local raw = redis.call('HGET', key, META)
        head.meta = raw ~= false and raw or nil
    elseif list then
        head.list = true
        head.meta = list_meta(redis.call('LINDEX', key, '0'), redis.call('LLEN', key) - 1)
    elseif head.kind == 'inline' then
        head.blob = redis.call('GET', key)
        head.meta, head.start = inline_head(head.blob)
    end
    return head
end

-- The whole value of the inline string container `head` was read from.
local function inline_blob(key, head)
    if head.blob == nil then
        head.blob = redis.call('GET', key)
    end
    return head.blob
end

-- decode_inline's answer for the inline container `head` was read from, string or list.
local function inline_contents(key, head)
    if head.list then
        return decode_list(key)
    end
    return decode_inline(inline_blob(key, head))
end

local function record_count(key)
    local kind = container_kind(key)
    if kind == 'hash' then
        local count = redis.call('HLEN', key)
        if redis.call('HEXISTS', key, META) == 1 then
            count = count - 1
        end
        return count
    elseif kind == 'inline' then
        return #read_container(key).records
    end
    return 0
end

-- Records of the hash container `head` was read from (damaged ones included): its
-- fields but the meta. Record ids are never META, so writing records since the
-- read cannot have added the meta field: it is there exactly when the read found it.
local function hash_record_count(key, head)
    local count = redis.call('HLEN', key)
    if head.meta ~= nil then
        count = count - 1
    end
    return count
end

-- Whether the container `head` was read from holds no record, damaged ones included.
local function holds_no_records(key, head)
    if head.kind == 'hash' then
        return hash_record_count(key, head) == 0
    elseif head.list then
        return false -- a list holds two records or more (write_list)
    elseif head.kind == 'inline' then
        -- nothing after the meta; behind an unreadable head nothing is readable either
        return head.start == nil or head.start > #inline_blob(key, head)
    end
    return true
end

-- The records a container holds by its meta's count `written`: for an inline one, less
-- the entries superseded (so it is decoded: only for a choice that needs the exact count).
local function held_count(key, head, written)
    if head.kind ~= 'inline' then
        return written
    end
    local _, _, _, superseded = inline_contents(key, head)
    return written - superseded
end
