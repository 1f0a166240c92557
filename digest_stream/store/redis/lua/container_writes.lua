-- container_writes.lua: writing record containers (containers.lua holds their encodings and
-- reading): a meta replaced in place, a batch appended or stored in the fitting encoding,
-- trimmed to capacity, and a cause marked.
-- Holds: write_meta, last_delivery_of, hash_fields, write_hash, trim_victims,
--   entry_of, distinct_records, fits_inline, push_entries, store_batch, mark_cause.
-- Needs: digest_key (keys); encode_field, format_timeline_meta, parse_digest_meta,
--   parse_timeline_meta (encoding); call_chunked, sort_records (helpers); encode_inline,
--   hash_record_count, inline_blob, inline_contents, INLINE_MAX_BYTES, META,
--   read_container, read_head, read_meta (containers).

-- Replaces the meta of the container `head` was read from, keeping its records; a
-- missing container becomes an inline one holding only the meta.
local function write_meta(key, head, meta)
    if head.kind == 'hash' then
        redis.call('HSET', key, META, meta)
    elseif head.list then
        redis.call('LSET', key, '0', meta)
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

-- One record's entry in an inline container, byte for byte what
-- cmsgpack.pack(id, timestamp, payload) writes (a list container's element), in one
-- concatenation. The msgpack headers of its strings are made as cmsgpack writes them
-- (fixstr, str8, str16, str32).
local entry_of
do
    local short_header = {} -- by length, filled as they come (as COUNT_TEXT)

    local function string_header(length)
        if length <= 0xff then
            local header = short_header[length]
            if header == nil then
                header = length < 32 and string.char(0xa0 + length) or string.char(0xd9, length)
                short_header[length] = header
            end
            return header
        elseif length <= 0xffff then
            return struct.pack('>BH', 0xda, length)
        end
        return struct.pack('>BI4', 0xdb, length)
    end

    entry_of = function(record)
        local id, payload = record.id, record.payload
        return string_header(#id) .. id .. cmsgpack.pack(record.timestamp)
            .. string_header(#payload) .. payload
    end
end

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

-- Whether `count` records taking `size` bytes (0: not known yet) fit `key`'s inline
-- container. Each timeline has its own limits: `inline_records` and INLINE_MAX_BYTES less up
-- to a quarter, fixed by a hash of its key. A conversion to a hash costs Redis about 800k
-- instructions (the value read into Lua, decoded, each record written as a field), so
-- timelines that grow together (a burst spread over many timelines) must not all convert in
-- the same call: 5,000 that did stalled the ingest for 1.5 s (bench scenario 2 at 10,000
-- events/s); spread, a few convert per call. Below every timeline's limits (the common
-- call) no hash is computed. A quarter keeps the default's 24 records inline everywhere.
local function fits_inline(key, inline_records, count, size)
    if count > inline_records or size > INLINE_MAX_BYTES then
        return false
    end
    local spread = math.floor(inline_records / 4)
    local limit = inline_records - spread
    if count > limit or size * inline_records > INLINE_MAX_BYTES * limit then
        limit = inline_records - tonumber(string.sub(redis.sha1hex(key), 1, 8), 16) % (spread + 1)
    end
    return count <= limit and size * inline_records <= INLINE_MAX_BYTES * limit
end

-- Pushes the entries `...` (entry_of's) to the list container `key` with `command` (RPUSH,
-- or RPUSHX where the key may be no list: a missing key answers 0, a string or a hash an
-- error) and sets its TTL (ms), without reading what it holds: RPUSH answers the count.
-- Past a limit (capacity; the timeline's inline limits, its bytes taken as the count times
-- the largest entry pushed: exact for records of one size) the push is taken back. Returns
-- the records it holds now (entries: an upper bound, as an id pushed again supersedes the
-- earlier entry), or false for the caller's general path. (The entries as arguments, not a
-- table: the interleaved lane pushes one per timeline.)
local function push_entries(key, command, capacity, inline_records, ms, ...)
    local pushed = select('#', ...)
    if pushed >= inline_records then
        return false -- past every limit whatever the list holds (and never a long unpack)
    end
    local length = redis.pcall(command, key, ...)
    if type(length) ~= 'number' or length <= pushed then
        return false -- no list (an RPUSH that made one only follows a read that found one)
    end
    local count, largest = length - 1, #(...)
    for i = 2, pushed do
        largest = math.max(largest, #(select(i, ...)))
    end
    if (capacity > 0 and count > capacity)
            or not fits_inline(key, inline_records, count, count * largest) then
        redis.call('RPOP', key, pushed)
        return false
    end
    redis.call('PEXPIRE', key, ms)
    return count
end

local store_batch
do
    -- A list container's elements for `meta` (parsed) and `records`, with `size`: the bytes
    -- of the inline string they stand for (its limit is INLINE_MAX_BYTES, as a string's). A
    -- list's count is its elements (list_meta): records its meta counted that are not there
    -- (evicted, unreadable) are counted dropped now, as an open would count them.
    local function inline_values(meta, records)
        local values = {false}
        local size = 3
        for i, record in ipairs(records) do
            local entry = entry_of(record)
            values[i + 1], size = entry, size + #entry
        end
        values.meta = format_timeline_meta(meta) -- a string's: its count as it was
        if #records > 1 then
            local held = {}
            for field, value in pairs(meta) do
                held[field] = value
            end
            held.dropped = meta.dropped + math.max(0, meta.written - #records)
            held.written = #records
            values[1] = format_timeline_meta(held)
        end
        values.size = size + #values.meta
        return values
    end

    -- Stores `values` (a meta, then its records' entries) as a list container with a TTL of
    -- `ms`; a meta with at most one record as a string (a small list costs Redis 7.0 about
    -- 180 bytes more than a string: a timeline of one record keeps a string's size).
    local function write_list(key, values, ms, exists)
        if #values <= 2 then
            redis.call('SET', key, cmsgpack.pack(values.meta) .. (values[2] or ''), 'PX', ms)
            return
        end
        if exists then
            redis.call('DEL', key)
        end
        call_chunked('RPUSH', key, values)
        redis.call('PEXPIRE', key, ms)
    end

    -- Applies one batch's records (in order) to a timeline container, trims it to
    -- capacity, stores it in the fitting encoding and sets its TTL (ms). `head` is the
    -- container as begin_timelines found it (nothing has written it since; an inline one
    -- possibly read as its prefix only). Returns how many it dropped, and how many records it
    -- holds now (for an inline container appended to: entries, an upper bound).
    store_batch = function(tag, key, head, batch, capacity, inline_records, ms)
        if head.list then
            -- the common case: pushed, nothing read (push_entries)
            local entries = {}
            for i, record in ipairs(distinct_records(batch)) do
                entries[i] = entry_of(record)
            end
            local written = push_entries(key, 'RPUSH', capacity, inline_records, ms,
                unpack(entries))
            if written then
                head.appended = true -- written is a bound (held_count)
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
            raw_meta, records, _, superseded = inline_contents(key, head)
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
        local values = fits_inline(key, inline_records, #records, 0)
            and inline_values(meta, records)
        if values and fits_inline(key, inline_records, #records, values.size) then
            write_list(key, values, ms, head.kind ~= 'none')
        else
            write_hash(key, format_timeline_meta(meta), records)
            redis.call('PEXPIRE', key, ms)
        end
        return dropped, meta.written
    end
end

-- Sets the cause in the meta of an existing container, keeping its records.
local function mark_cause(key, cause)
    local head = read_head(key)
    local meta = parse_timeline_meta(head.meta)
    meta.cause = cause
    write_meta(key, head, format_timeline_meta(meta))
end
