-- containers.lua: record containers. A record container is ONE key per timeline, in one
-- of two encodings:
--   inline  a string cmsgpack(meta, id1, ts1, payload1, id2, ...) while the
--           timeline is small (few records, at most INLINE_MAX_BYTES stored): one
--           key, one allocation for all of it. New records are appended to the
--           stored bytes and the count at the head rewritten in place, without
--           reading the records (append_inline): an append costs what it adds. An
--           id appended again supersedes its earlier entry (the last one wins);
--           the next rewrite (general path, open) drops the earlier one;
--   hash    field id -> struct.pack('>d', ts) .. payload, meta under field ""
--           once it grows: one hash entry per record, updated in place.
-- Ordering is computed only when a digest is opened or capacity trims, so no
-- per-record index (sorted set) is kept at all; large sets of records are ordered by
-- Redis itself in the scratch zset, never by a Lua comparator.
-- Holds: META, INLINE_MAX_BYTES, HEAD_READ, reading (read_container, read_meta, read_head,
--   record_count, held_count, ...), writing (write_meta, write_hash, append_inline,
--   store_batch) and mark_cause.
-- Needs: invalid_state (guards); digest_key (keys); decode_field, encode_field,
--   format_timeline_meta, format_written, parse_digest_meta, parse_timeline_meta, WRITTEN_WIDTH
--   (encoding); call_chunked, sort_records (helpers).

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

local function container_kind(key)
    local kind = redis.call('TYPE', key).ok
    if kind == 'string' then
        return 'inline'
    elseif kind == 'hash' or kind == 'none' then
        return kind
    end
    invalid_state('unexpected ' .. kind .. ' at ' .. key)
end

local function pack_values(...)
    return {n = select('#', ...), ...}
end

-- Returns the meta, the records, how many entries were unreadable and how many an entry
-- of the same id later in the value superseded: the later one is the record (at the
-- earlier one's place), as if it had overwritten it (append_inline appends it instead).
local function decode_inline(blob)
    local ok, values = pcall(function() return pack_values(cmsgpack.unpack(blob)) end)
    local records, damaged, superseded = {}, 0, 0
    if not ok or type(values[1]) ~= 'string' then
        -- Unreadable as a whole: nothing can be recovered or counted.
        return nil, records, damaged, superseded
    end
    local position = {}
    for i = 2, values.n, 3 do
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
    return values[1], records, damaged, superseded
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

local function encode_inline(meta, records)
    local values = {meta}
    for _, record in ipairs(records) do
        values[#values + 1] = record.id
        values[#values + 1] = record.timestamp
        values[#values + 1] = record.payload
    end
    return cmsgpack.pack(unpack(values))
end

local function read_container(key, known_kind)
    local kind = known_kind or container_kind(key)
    if kind == 'none' then
        return {kind = kind, records = {}, damaged = {}, damaged_count = 0}
    elseif kind == 'inline' then
        local meta, records, damaged, superseded = decode_inline(redis.call('GET', key))
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
    local kind = container_kind(key)
    if kind == 'hash' then
        local raw = redis.call('HGET', key, META)
        return raw ~= false and raw or nil
    elseif kind == 'inline' then
        return (inline_head(redis.call('GET', key)))
    end
    return nil
end

-- A container's kind and raw meta, plus an inline one's blob and the position its
-- records start at (nil for an unreadable head), without decoding the records: read
-- once by the function that then writes the container, so no later step reads again.
-- prefix_only: an inline container's first HEAD_READ bytes only (blob: nil unless that
-- was all of it), for append_inline, which writes without reading the records.
local function read_head(key, prefix_only)
    local head = {kind = container_kind(key)}
    if head.kind == 'hash' then
        local raw = redis.call('HGET', key, META)
        head.meta = raw ~= false and raw or nil
    elseif head.kind == 'inline' then
        if prefix_only then
            local prefix = redis.call('GETRANGE', key, 0, HEAD_READ - 1)
            head.meta, head.start = inline_head(prefix)
            if #prefix < HEAD_READ then
                head.blob = prefix -- that was all of it
            elseif head.meta == nil then
                prefix_only = false -- a longer head (or an unreadable one): read it whole
            end
        end
        if not prefix_only then
            head.blob = redis.call('GET', key)
            head.meta, head.start = inline_head(head.blob)
        end
    end
    return head
end

-- The whole value of the inline container `head` was read from.
local function inline_blob(key, head)
    if head.blob == nil then
        head.blob = redis.call('GET', key)
    end
    return head.blob
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
        local _, records = decode_inline(redis.call('GET', key))
        return #records
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
    elseif head.kind == 'inline' then
        -- nothing after the meta; behind an unreadable head nothing is readable either
        return head.start == nil or head.start > #inline_blob(key, head)
    end
    return true
end

-- Replaces the meta of the container `head` was read from, keeping its records; a
-- missing container becomes an inline one holding only the meta.
local function write_meta(key, head, meta)
    if head.kind == 'hash' then
        redis.call('HSET', key, META, meta)
    elseif head.start ~= nil then
        -- keep the records' bytes as they are; only the head changes
        local records = string.sub(inline_blob(key, head), head.start)
        redis.call('SET', key, cmsgpack.pack(meta) .. records, 'KEEPTTL')
    else
        -- missing, or an unreadable head: no record behind it could be decoded either
        redis.call('SET', key, encode_inline(meta, {}), 'KEEPTTL')
    end
end

-- A timeline's last delivery: in its own meta (parsed), else in its open digest's meta
-- (the digest carries it while open). `digest`: that digest's parsed meta, false when
-- the caller found none, or nil to have it read here, only when it is needed.
local function last_delivery_of(tag, timeline, meta, digest)
    if meta.last_delivery ~= nil then
        return meta.last_delivery
    end
    if digest == nil then
        digest = parse_digest_meta(read_meta(digest_key(tag, timeline)))
    end
    return digest and digest.last_delivery or nil
end

-- Appends `records` to `fields` as HSET field/value pairs: id -> timestamp .. payload.
local function hash_fields(fields, records)
    for _, record in ipairs(records) do
        fields[#fields + 1] = record.id
        fields[#fields + 1] = encode_field(record.timestamp, record.payload)
    end
    return fields
end

local function write_hash(key, meta, records)
    redis.call('DEL', key)
    call_chunked('HSET', key, hash_fields({META, meta}, records))
end

-- Ids to remove so that `records` keeps the newest `capacity`; damaged ids go first.
local function trim_victims(tag, records, damaged, capacity)
    local victims = {}
    for _, id in ipairs(damaged) do
        table.insert(victims, id)
    end
    -- damaged entries are gone anyway: only intact records count against capacity
    local excess = #records - capacity
    if excess > 0 then
        local oldest_first = sort_records(tag, records, false)
        for i = 1, excess do
            table.insert(victims, oldest_first[i].id)
        end
    end
    return victims
end

-- The msgpack header of a string of `length` bytes, as cmsgpack writes it (fixstr, str8,
-- str16, str32), so a record packed by hand reads back exactly like one cmsgpack packed.
local SHORT_STRING_HEADER = {} -- by length, filled as they come (as COUNT_TEXT)

local function string_header(length)
    if length <= 0xff then
        local header = SHORT_STRING_HEADER[length]
        if header == nil then
            header = length < 32 and string.char(0xa0 + length) or string.char(0xd9, length)
            SHORT_STRING_HEADER[length] = header
        end
        return header
    elseif length <= 0xffff then
        return struct.pack('>BH', 0xda, length)
    end
    return struct.pack('>BI4', 0xdb, length)
end

-- A timeline meta whose written count is WRITTEN_WIDTH (3) digits wide (format_written):
-- the count append_inline rewrites in place. (A literal: the library's load cannot call
-- string functions.)
local PADDED_WRITTEN = '^%d%d%d|'

-- The records of a batch, one per id: a repeated id keeps its first place and its last
-- value (as if it had overwritten the earlier one).
local function distinct_records(batch)
    if #batch < 2 then
        return batch
    end
    local records, position = {}, {}
    for _, record in ipairs(batch) do
        local index = position[record.id]
        if index == nil then
            records[#records + 1] = record
            position[record.id] = #records
        else
            records[index] = record
        end
    end
    return records
end

-- The common case of an inline (or missing) container, in O(batch): the records are
-- appended to the stored value (APPEND) and the count at its head rewritten in place
-- (SETRANGE, the same width: WRITTEN_WIDTH), without reading the records stored: the head
-- (read_head with prefix_only) is all it needs. A record whose id is stored already is
-- appended too, and supersedes the earlier entry (decode_inline); `written` counts entries,
-- so it bounds the records held from above, and every limit checked on it (inline_records,
-- capacity) holds for the exact count too. Past a limit the general path decodes and
-- counts exactly. Returns the count written, or false to send the caller there.
local function append_inline(key, head, batch, capacity, inline_records, ms)
    if head.kind == 'inline' and (head.start == nil
            or not string.find(head.meta, PADDED_WRITTEN)) then
        return false -- an unreadable head, or a count written before it was padded
    end
    local meta = head.parsed or parse_timeline_meta(head.meta)
    local records = distinct_records(batch)
    local count = meta.written + #records
    if count > inline_records or (capacity > 0 and count > capacity)
            or count >= 10 ^ WRITTEN_WIDTH then
        return false
    end
    -- parts[1] and [2]: for a value written whole (below), its head and the records stored;
    -- then byte for byte what cmsgpack.pack(id, timestamp, payload) writes per record
    local parts = {'', ''}
    for _, record in ipairs(records) do
        parts[#parts + 1] = string_header(#record.id)
        parts[#parts + 1] = record.id
        parts[#parts + 1] = cmsgpack.pack(record.timestamp)
        parts[#parts + 1] = string_header(#record.payload)
        parts[#parts + 1] = record.payload
    end
    meta.written = count
    if head.kind ~= 'inline' or head.blob ~= nil then
        -- a new container, or one read whole with its head (shorter than HEAD_READ, often
        -- just a meta: what the leading edge leaves): one SET instead of four commands
        parts[1] = cmsgpack.pack(format_timeline_meta(meta))
        parts[2] = head.blob and string.sub(head.blob, head.start) or ''
        local blob = table.concat(parts)
        if #blob > INLINE_MAX_BYTES then
            return false
        end
        redis.call('SET', key, blob, 'PX', ms)
        if head.kind == 'inline' then
            head.blob, head.appended = nil, true -- as below: stale, and written is a bound
        end
        return count
    end
    local length = redis.call('APPEND', key, table.concat(parts))
    if length > INLINE_MAX_BYTES then
        -- grown past the inline size: a hash of everything it holds now, the batch included
        local _, stored, _, superseded = decode_inline(redis.call('GET', key))
        head.blob = nil -- what was read is stale
        meta.written = count - superseded
        write_hash(key, format_timeline_meta(meta), stored)
        redis.call('PEXPIRE', key, ms)
        return meta.written
    end
    head.blob, head.appended = nil, true -- what was read is stale; written is a bound
    redis.call('SETRANGE', key, head.start - #head.meta - 1, format_written(count))
    -- APPEND leaves the string room to grow (as much again as its length: a timeline that
    -- gets one record per batch would hold twice its bytes); BITOP writes the same bytes to
    -- a value of exactly their size (dropping the TTL, which is set again below).
    redis.call('BITOP', 'OR', key, key)
    redis.call('PEXPIRE', key, ms)
    return count
end

-- The records a container holds by its meta's count `written`: for an inline one, less
-- the entries superseded (so it is decoded: only for a choice that needs the exact count).
local function held_count(key, head, written)
    if head.kind ~= 'inline' then
        return written
    end
    local _, _, _, superseded = decode_inline(inline_blob(key, head))
    return written - superseded
end

-- Applies one batch's records (in order) to a timeline container, trims it to
-- capacity, stores it in the fitting encoding and sets its TTL (ms). `head` is the
-- container as begin_timelines found it (nothing has written it since; an inline one
-- possibly read as its prefix only). Returns how many it dropped, and how many records it
-- holds now (for an inline container appended to: entries, an upper bound).
local function store_batch(tag, key, head, batch, capacity, inline_records, ms)
    if head.kind ~= 'hash' then
        local written = append_inline(key, head, batch, capacity, inline_records, ms)
        if written then
            return 0, written
        end
    end
    if head.kind == 'hash' then
        local meta = head.parsed or parse_timeline_meta(head.meta)
        meta.written = meta.written + call_chunked('HSET', key, hash_fields({}, batch))
        local dropped = 0
        if capacity > 0 and hash_record_count(key, head) > capacity then
            local container = read_container(key, 'hash')
            local victims = trim_victims(tag, container.records, container.damaged, capacity)
            call_chunked('HDEL', key, victims)
            dropped = #victims
            meta.written = meta.written - dropped
            meta.dropped = meta.dropped + dropped
        end
        redis.call('HSET', key, META, format_timeline_meta(meta))
        redis.call('PEXPIRE', key, ms)
        return dropped, meta.written
    end

    -- the general path: decoded, merged, trimmed and written whole (a missing container
    -- may carry a fresh meta)
    local raw_meta, records, superseded = head.meta, {}, 0
    if head.kind == 'inline' then
        local _
        raw_meta, records, _, superseded = decode_inline(inline_blob(key, head))
    end
    local meta = parse_timeline_meta(raw_meta)
    meta.written = math.max(0, meta.written - superseded) -- the rewrite drops those entries
    local position = {}
    for index, record in ipairs(records) do
        position[record.id] = index
    end
    for _, record in ipairs(batch) do
        local index = position[record.id]
        local stored = {id = record.id, timestamp = record.timestamp, payload = record.payload}
        if index == nil then
            table.insert(records, stored)
            position[record.id] = #records
            meta.written = meta.written + 1
        else
            records[index] = stored
        end
    end
    local dropped = 0
    if capacity > 0 and #records > capacity then
        records = sort_records(tag, records, false)
        dropped = #records - capacity
        local kept = {}
        for i = dropped + 1, #records do
            kept[#kept + 1] = records[i]
        end
        records = kept
        meta.written = meta.written - dropped
        meta.dropped = meta.dropped + dropped
    end
    local blob = #records <= inline_records and encode_inline(format_timeline_meta(meta), records)
    if blob and #blob <= INLINE_MAX_BYTES then
        redis.call('SET', key, blob, 'PX', ms)
    else
        write_hash(key, format_timeline_meta(meta), records)
        redis.call('PEXPIRE', key, ms)
    end
    return dropped, meta.written
end

-- Sets the cause in the meta of an existing container, keeping its records.
local function mark_cause(key, cause)
    local head = read_head(key)
    local meta = parse_timeline_meta(head.meta)
    meta.cause = cause
    write_meta(key, head, format_timeline_meta(meta))
end
