#!lua name=digest_stream
--
-- digest-stream store: every timeline/schedule state transition, one atomic
-- function per operation (see docs/store.md for the command table).
--
-- All keys of one input partition share the hash tag "{<namespace>:<p>}", so
-- each call touches a single cluster slot. Callers pass the partition-level
-- keys they know in KEYS (for routing and declaration); per-timeline key names
-- are derived from the tag by the helpers below, mirrored in store/keys.py.
--
-- Layout per partition tag T:
--   T:w        zset    timeline -> due time             (WAITING)
--   T:r        zset    timeline -> time it became READY (READY)
--   T:o        string  the fence: "<offset>|<topic id>", the last applied Kafka
--                      offset and the id of the topic incarnation it belongs to;
--                      either part may be empty ("19": written before topic ids,
--                      "|<id>": reset for a new topic, nothing applied yet)
--   T:t:<tl>   record container: the timeline's pending records and its meta
--   T:d:<tl>   record container: the open digest's records and its meta
--   T:s        zset    scratch: exists only inside one call (sort_records)
--
-- A record container is ONE key per timeline, in one of two encodings:
--   inline  a string cmsgpack(meta, id1, ts1, payload1, id2, ...) while the
--           timeline is small (few records, few bytes): one key, one allocation
--           for all of it, rewritten whole on each batch (cheap while small; new
--           records are appended to the stored bytes without decoding them);
--   hash    field id -> struct.pack('>d', ts) .. payload, meta under field ""
--           once it grows: one hash entry per record, updated in place.
-- Ordering is computed only when a digest is opened or capacity trims, so no
-- per-record index (sorted set) is kept at all; large sets of records are ordered by
-- Redis itself in the scratch zset, never by a Lua comparator.

local LIBRARY_VERSION = '17'

-- Identifiers longer than this are refused: they end up inside key names and
-- hash fields, and a runaway id is almost certainly a producer bug.
local MAX_NAME_BYTES = 1024
-- Kafka offsets travel as Lua numbers (doubles): integers are exact up to 2^53.
local MAX_OFFSET = 9007199254740992
-- A Kafka topic id is a UUID, base64 (22 characters); room for other spellings.
local MAX_TOPIC_ID_BYTES = 64
-- Redis caps the number of Lua stack slots unpack() may use; chunk below it.
-- Even, so no chunk splits a field/value or score/member pair (HSET, ZADD).
local UNPACK_CHUNK = 1000
-- ds_add takes its timelines and its records each as ONE packed argument (struct formats,
-- big-endian): one argument per record field cost the client more than the Lua did.
-- A timeline: policy index (1-based), name length, name.
local TIMELINE_FORMAT = '>I4Hc0'
-- A record: timeline index (1-based), id length, id, timestamp, offset (a double: exact
-- up to MAX_OFFSET), payload length, payload.
local RECORD_FORMAT = '>I4Hc0ddI4c0'
-- A control operation of an add call (its optional last argument): how many of the call's
-- records come before it, its offset, its operation (CONTROL_CODES), timeline name length,
-- name, record id length, id.
local CONTROL_FORMAT = '>I4dBHc0Hc0'
-- Operation codes of CONTROL_FORMAT (CONTROL_CODES in store/redis.py).
local CONTROL_CODES = {'flush', 'cancel', 'cancel_all'}
-- Fields of one distinct policy of an add call: minimum, increment, maximum, ttl,
-- capacity, flush_at (0 = off), next_fire ("" = no calendar schedule).
local POLICY_WIDTH = 7
-- flush_at never makes a timeline due sooner than this after its last delivery (seconds;
-- FLUSH_AT_FLOOR in store/base.py).
local FLUSH_AT_FLOOR = 1
-- The meta field name: record ids must be non-empty, so "" never collides.
local META = ''
-- A container stays inline up to this many bytes of payload and ids; past it
-- (or past the caller's record limit) rewriting it whole per batch stops being
-- cheap, and it becomes a hash.
local INLINE_MAX_BYTES = 8192
-- Upper bound of the caller's inline record limit: keeps unpack() well inside
-- the Lua stack and inline rewrites small.
local INLINE_MAX_RECORDS = 128

-- Errors ---------------------------------------------------------------------

local function invalid_argument(message)
    error({err = 'ERR invalid_argument: ' .. message})
end

local function invalid_state(message)
    error({err = 'ERR invalid_state: ' .. message})
end

-- Key helpers (mirror of digest_stream/store/keys.py) ------------------------

local function tag_of(key)
    -- The tag is the leading "{namespace:partition}" of any of our keys.
    if type(key) ~= 'string' then
        invalid_argument('missing key')
    end
    local tag = string.match(key, '^({[%w_%.%-]+:%d+})')
    if tag == nil then
        invalid_argument('key does not start with a {namespace:partition} tag: ' .. key)
    end
    return tag
end

local function waiting_key(tag) return tag .. ':w' end
-- A sorted set that exists only inside one call (sort_records): never left behind.
local function scratch_key(tag) return tag .. ':s' end
local function ready_key(tag) return tag .. ':r' end
local function fence_key(tag) return tag .. ':o' end
local function timeline_key(tag, timeline) return tag .. ':t:' .. timeline end
local function digest_key(tag, timeline) return tag .. ':d:' .. timeline end

local function expect_key(keys, index, expected)
    if keys[index] ~= expected then
        invalid_argument('KEYS[' .. index .. '] must be ' .. expected .. ', got ' .. tostring(keys[index]))
    end
end

-- The tag of a partition-level call, whose KEYS are waiting, ready, fence (ds_add
-- has its own order).
local function partition_tag_of(keys)
    local tag = tag_of(keys[1])
    expect_key(keys, 1, waiting_key(tag))
    expect_key(keys, 2, ready_key(tag))
    expect_key(keys, 3, fence_key(tag))
    return tag
end

-- Argument parsing (guards: the Python side validates first) ----------------

local function parse_number(value, name)
    local number = tonumber(value)
    -- tonumber() accepts inf/nan spellings via strtod; refuse them.
    if number == nil or number ~= number or number == math.huge or number == -math.huge then
        invalid_argument(name .. ' must be a finite number, got ' .. tostring(value))
    end
    return number
end

local function parse_time(value, name)
    local number = parse_number(value, name)
    if number < 0 then
        invalid_argument(name .. ' must be >= 0, got ' .. tostring(value))
    end
    return number
end

local function parse_integer(value, name, minimum, maximum)
    local number = parse_number(value, name)
    if number ~= math.floor(number) or number < minimum or number > maximum then
        invalid_argument(name .. ' must be an integer in [' .. minimum .. ', ' .. maximum
            .. '], got ' .. tostring(value))
    end
    return number
end

local function parse_name(value, name)
    if type(value) ~= 'string' or #value == 0 or #value > MAX_NAME_BYTES then
        invalid_argument(name .. ' must be 1..' .. MAX_NAME_BYTES .. ' bytes')
    end
    return value
end

-- A topic id ("" = not known): base64 or hex characters only, so it never holds the '|'
-- that separates it from the offset in the fence.
local function parse_topic_id(value)
    if value == '' then
        return nil
    end
    if type(value) ~= 'string' or #value > MAX_TOPIC_ID_BYTES
            or string.find(value, '[^%w%+/=_%-]') then
        invalid_argument('topic id must be 1..' .. MAX_TOPIC_ID_BYTES
            .. ' base64 or hex characters, got ' .. tostring(value))
    end
    return value
end

local function parse_digest_id(value)
    if type(value) ~= 'string' or #value ~= 32 or string.find(value, '[^0-9a-f]') then
        invalid_argument('digest id must be 32 lowercase hex characters, got ' .. tostring(value))
    end
    return value
end

-- Ten years. Beyond ~1e14 ms Lua would hand PEXPIRE an exponent-form number ("1e+17"),
-- which Redis refuses; no digest needs to wait this long anyway.
local MAX_TTL = 315360000

local function parse_ttl(value)
    local ttl = parse_time(value, 'ttl')
    if ttl <= 0 then
        invalid_argument('ttl must be > 0, got ' .. tostring(value))
    end
    if ttl > MAX_TTL then
        invalid_argument('ttl must be at most ' .. MAX_TTL .. ' seconds, got ' .. tostring(value))
    end
    return ttl
end

-- The POLICY_WIDTH fields of a policy from args[base].
local function parse_policy(args, base)
    local policy = {
        minimum = parse_time(args[base], 'minimum_delay'),
        increment = parse_time(args[base + 1], 'increment_delay'),
        maximum = parse_time(args[base + 2], 'maximum_delay'),
        ttl = parse_ttl(args[base + 3]),
        -- 0 means "no capacity limit"
        capacity = parse_integer(args[base + 4], 'capacity', 0, MAX_OFFSET),
        -- 0 means "no flush_at"
        flush_at = parse_integer(args[base + 5], 'flush_at', 0, MAX_OFFSET),
    }
    if args[base + 6] ~= '' then
        -- the calendar schedule's next fire time, computed by the caller (no cron in Lua)
        policy.next_fire = parse_time(args[base + 6], 'next fire')
    end
    if policy.ttl <= policy.maximum then
        invalid_argument('ttl (' .. args[base + 3] .. ') must exceed maximum_delay ('
            .. args[base + 2] .. ')')
    end
    return policy
end

-- A timeline of an add call: its own state and its (shared) policy, not a copy of the
-- policy's values (at one record per timeline, every per-timeline field is per-record
-- work). The state fields add and begin_timelines set are made here, so the table is
-- allocated at its final size once.
local function new_timeline(policy, timeline, key)
    return {
        timeline = timeline, key = key, policy = policy, ready = false, due_changed = false,
        became_ready = false, head = false, batch = false, touched = false,
    }
end

-- Encoding -------------------------------------------------------------------

local function format_float(number)
    -- 17 significant digits round-trip any double exactly.
    return string.format('%.17g', number)
end

local function format_integer(number)
    return string.format('%.0f', number)
end

-- format_integer's text of the counts every timeline meta holds, each made once (filled
-- as they come: the library's load cannot call string functions). Integers only: any
-- other number is not a key of it; 0 is kept apart from -0, which formats as "-0".
local COUNT_TEXT = {}
local COUNT_TEXT_MAX = 1023

local function format_count(number)
    local text = COUNT_TEXT[number]
    if text == nil or (number == 0 and 1 / number < 0) then
        text = format_integer(number)
        if number >= 0 and number <= COUNT_TEXT_MAX and number == math.floor(number)
                and text ~= '-0' then
            COUNT_TEXT[number] = text
        end
    end
    return text
end

local function ttl_ms(ttl)
    -- PEXPIRE keeps sub-second TTLs exact; at least 1 ms so a key never lives forever.
    return math.max(1, math.floor(ttl * 1000))
end

local function encode_field(timestamp, payload)
    return struct.pack('>d', timestamp) .. payload
end

-- Returns timestamp, payload; nil for a damaged value (counted as missing).
local function decode_field(value)
    if type(value) ~= 'string' or #value < 8 then
        return nil
    end
    return struct.unpack('>d', value), string.sub(value, 9)
end

local function split_meta(value)
    local parts = {}
    if type(value) ~= 'string' then
        return parts
    end
    for part in string.gmatch(value .. '|', '([^|]*)|') do
        table.insert(parts, part)
    end
    return parts
end

local function optional_float(value)
    if value == nil then
        return ''
    end
    return format_float(value)
end

-- The optional last fields of both metas: a mark, "1" when the timeline's earlier data
-- expired (its keys vanished while it was still scheduled); for a timeline also "o" when its
-- container was started while a digest was open (its records wait behind that digest,
-- so finding no digest at the next open means the digest expired); then the cause, one
-- letter saying why the timeline is due (CAUSES below), when one is recorded. Metas
-- written before causes existed simply end earlier.
local function mark_suffix(meta)
    local mark = ''
    if meta.expired then
        mark = '1'
    elseif meta.behind_open then
        mark = 'o'
    end
    if meta.cause ~= nil then
        return '|' .. mark .. '|' .. meta.cause
    elseif mark ~= '' then
        return '|' .. mark
    end
    return ''
end

local function optional_cause(value)
    if value == nil or value == '' then
        return nil
    end
    return value
end

-- Timeline meta: "written|dropped|last_delivery[|mark[|cause]]" (mark "1", "o" or empty:
-- mark_suffix; last_delivery may be empty).
-- written counts the records the container should hold, so records that
-- vanished (evicted, deleted by hand) are detected and reported as dropped.
local function parse_timeline_meta(raw)
    -- the common metas, read without splitting them: none yet, and "written|dropped|"
    if raw == nil then
        return {written = 0, dropped = 0, expired = false, behind_open = false}
    end
    local written, dropped = string.match(raw, '^(%d+)|(%d+)|$')
    if written ~= nil then
        return {
            written = tonumber(written), dropped = tonumber(dropped), expired = false,
            behind_open = false,
        }
    end
    local parts = split_meta(raw)
    return {
        written = tonumber(parts[1] or '') or 0,
        dropped = tonumber(parts[2] or '') or 0,
        last_delivery = tonumber(parts[3] or ''),
        expired = parts[4] == '1',
        behind_open = parts[4] == 'o',
        cause = optional_cause(parts[5]),
    }
end

local function format_timeline_meta(meta)
    return format_count(meta.written) .. '|' .. format_count(meta.dropped) .. '|'
        .. optional_float(meta.last_delivery) .. mark_suffix(meta)
end

-- Digest meta: "id|opened_at|dropped|records|last_delivery[|1][|cause]".
local function parse_digest_meta(raw)
    if type(raw) ~= 'string' then
        return nil
    end
    local parts = split_meta(raw)
    return {
        id = parts[1] or '',
        opened_at = tonumber(parts[2] or '') or 0,
        dropped = tonumber(parts[3] or '') or 0,
        records = tonumber(parts[4] or '') or 0,
        last_delivery = tonumber(parts[5] or ''),
        expired = parts[6] == '1',
        cause = optional_cause(parts[7]),
    }
end

local function format_digest_meta(meta)
    return meta.id .. '|' .. format_float(meta.opened_at) .. '|' .. format_integer(meta.dropped)
        .. '|' .. format_integer(meta.records) .. '|' .. optional_float(meta.last_delivery)
        .. mark_suffix(meta)
end

-- Ordering -------------------------------------------------------------------

-- Byte-wise string order. Lua's "<" on strings uses strcoll(), and Redis sets
-- LC_COLLATE from its environment, so "<" is not a stable order across hosts.
local function bytes_less(a, b)
    local length = math.min(#a, #b)
    for i = 1, length do
        local x, y = string.byte(a, i), string.byte(b, i)
        if x ~= y then
            return x < y
        end
    end
    return #a < #b
end

-- Oldest first: by timestamp, ties by id bytes.
local function older(a, b)
    if a.timestamp ~= b.timestamp then
        return a.timestamp < b.timestamp
    end
    return bytes_less(a.id, b.id)
end

local function newer(a, b)
    return older(b, a)
end

-- Up to this many records are sorted by table.sort with the comparators above: each
-- comparison may walk two ids byte by byte in Lua, which is cheap for a handful of
-- records but took 35 s for 20,000 ids of 1,000 bytes sharing a prefix. More records
-- are sorted by Redis in a scratch sorted set (sort_records below), in C.
local LUA_SORT_MAX = 16

-- Redis helpers -----------------------------------------------------------------

-- Returns the sum of the chunks' integer replies (fields created, members removed, keys
-- found...); `key` nil: no key before the items (EXISTS).
local function call_chunked(command, key, items)
    local total = 0
    for first = 1, #items, UNPACK_CHUNK do
        local last = math.min(first + UNPACK_CHUNK - 1, #items)
        if key == nil then
            total = total + redis.call(command, unpack(items, first, last))
        else
            total = total + redis.call(command, key, unpack(items, first, last))
        end
    end
    return total
end

-- Records in age order: by timestamp, ties by id bytes, oldest first (or newest first).
-- That is exactly a sorted set's order (score, then member bytes), so a large set of
-- records is ordered by Redis in a scratch zset of the partition's slot: O(n log n)
-- in C, whatever the ids look like. Returns a new list; `records` is left as it was.
local function sort_records(tag, records, newest_first)
    if #records <= LUA_SORT_MAX then
        local sorted = {}
        for i, record in ipairs(records) do
            sorted[i] = record
        end
        table.sort(sorted, newest_first and newer or older)
        return sorted
    end
    local scratch = scratch_key(tag)
    local by_id, additions = {}, {}
    for _, record in ipairs(records) do
        by_id[record.id] = record
        additions[#additions + 1] = format_float(record.timestamp)
        additions[#additions + 1] = record.id
    end
    redis.call('DEL', scratch)
    call_chunked('ZADD', scratch, additions)
    local ids = redis.call(newest_first and 'ZREVRANGE' or 'ZRANGE', scratch, 0, -1)
    redis.call('DEL', scratch)
    local sorted = {}
    for i, id in ipairs(ids) do
        sorted[i] = by_id[id]
    end
    return sorted
end

-- Partition-level keys are shared by timelines whose policies may differ, so
-- a write only ever lengthens their TTL (never shortens another policy's).
local function extend_ttl(key, ms)
    local current = redis.call('PTTL', key)
    if current == -1 or (current >= 0 and current < ms) then
        redis.call('PEXPIRE', key, ms)
    end
end

-- The fence is the one key without a TTL: it is a single key per partition (it cannot
-- leak), and it must outlive a stopped service, or expiry would look like lost state.
local function refresh_partition_ttl(tag, ttl)
    local ms = ttl_ms(ttl)
    extend_ttl(waiting_key(tag), ms)
    extend_ttl(ready_key(tag), ms)
end

-- The fence: last applied offset (or nil) and the topic id it belongs to (or nil).
local function read_fence(tag)
    local raw = redis.call('GET', fence_key(tag))
    if raw == false then
        return nil, nil
    end
    local offset_part, topic = string.match(raw, '^([^|]*)|(.*)$')
    if offset_part == nil then
        offset_part = raw -- written before the fence knew its topic
    end
    if topic == '' then
        topic = nil
    end
    if offset_part == '' then
        return nil, topic
    end
    local fence = tonumber(offset_part)
    if fence == nil then
        invalid_state('fence value is not a number: ' .. raw)
    end
    return fence, topic
end

local function write_fence(tag, offset, topic)
    if offset == nil and topic == nil then
        redis.call('DEL', fence_key(tag))
        return
    end
    local value = offset ~= nil and format_integer(offset) or ''
    if topic ~= nil then
        value = value .. '|' .. topic
    end
    redis.call('SET', fence_key(tag), value)
end

-- Moves the first `limit` members of `source` scored in [-inf, bound] (by score, then
-- name) into `destination`; `score_for(original_score)` decides the new score. Returns
-- flat {timeline, score, ...} and whether more such members remain: a backlog is moved
-- in slices, so no call's work (or reply) grows with it.
local function move_range(source, destination, bound, score_for, limit)
    local found = redis.call('ZRANGEBYSCORE', source, '-inf', bound, 'WITHSCORES',
        'LIMIT', 0, limit)
    local moved, members, additions = {}, {}, {}
    for i = 1, #found, 2 do
        local timeline, score = found[i], found[i + 1]
        table.insert(moved, timeline)
        table.insert(moved, score)
        table.insert(members, timeline)
        table.insert(additions, score_for(score))
        table.insert(additions, timeline)
    end
    if #members > 0 then
        call_chunked('ZREM', source, members)
        -- ZADD takes score/member pairs: chunks must stay even (UNPACK_CHUNK is).
        call_chunked('ZADD', destination, additions)
    end
    return moved, redis.call('ZCOUNT', source, '-inf', bound) > 0
end

-- The most timelines one schedule or maintenance call moves.
local MAX_SLICE = 100000

-- Record containers ------------------------------------------------------------
--
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

local function decode_inline(blob)
    local ok, values = pcall(function() return pack_values(cmsgpack.unpack(blob)) end)
    local records, damaged = {}, 0
    if not ok or type(values[1]) ~= 'string' then
        -- Unreadable as a whole: nothing can be recovered or counted.
        return nil, records, damaged
    end
    for i = 2, values.n, 3 do
        local id, timestamp, payload = values[i], values[i + 1], values[i + 2]
        if type(id) == 'string' and #id > 0 and type(timestamp) == 'number'
                and type(payload) == 'string' then
            table.insert(records, {id = id, timestamp = timestamp, payload = payload})
        else
            damaged = damaged + 1
        end
    end
    return values[1], records, damaged
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

local function inline_size(records)
    local size = 0
    for _, record in ipairs(records) do
        size = size + #record.id + #record.payload
    end
    return size
end

local function read_container(key, known_kind)
    local kind = known_kind or container_kind(key)
    if kind == 'none' then
        return {kind = kind, records = {}, damaged = {}, damaged_count = 0}
    elseif kind == 'inline' then
        local meta, records, damaged = decode_inline(redis.call('GET', key))
        -- an inline record has no field to delete: it is only counted
        return {kind = kind, meta = meta, records = records, damaged = {}, damaged_count = damaged}
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
local function read_head(key)
    local head = {kind = container_kind(key)}
    if head.kind == 'hash' then
        local raw = redis.call('HGET', key, META)
        head.meta = raw ~= false and raw or nil
    elseif head.kind == 'inline' then
        head.blob = redis.call('GET', key)
        head.meta, head.start = inline_head(head.blob)
    end
    return head
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
        return head.start == nil or head.start > #head.blob
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
        redis.call('SET', key, cmsgpack.pack(meta) .. string.sub(head.blob, head.start), 'KEEPTTL')
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

-- The common case of an inline (or missing) container, without decoding it: the
-- batch's ids are new to it and it stays inline and under capacity, so the records
-- are appended to the blob's bytes. `written` bounds the records it holds, and the
-- blob's length bounds their ids and payloads, so these checks never pass where the
-- general path would choose otherwise. Returns false to send the caller there.
-- Making a Lua string costs a hash over every byte of it (Redis's Lua hashes whole
-- strings), so the new value is made once: the search runs on the blob as read, and
-- the meta, the stored records and the new ones are joined in one table.concat.
local function append_inline(key, head, batch, capacity, inline_records, ms)
    local start = 1
    if head.kind == 'inline' then
        if head.start == nil then
            return false
        end
        start = head.start
    end
    local meta = head.parsed or parse_timeline_meta(head.meta)
    local count = meta.written + #batch
    if count > inline_records or (capacity > 0 and count > capacity) then
        return false
    end
    local blob = head.blob or ''
    -- parts[1] and [2]: the new meta and the records stored (below)
    -- ids: the batch's own ids so far, to find one repeated within it (none in one record)
    local size, parts, ids = #blob - start + 1, {'', ''}, #batch > 1 and {} or nil
    for _, record in ipairs(batch) do
        local packed_id = cmsgpack.pack(record.id)
        -- a payload may contain these bytes too: a false alarm only costs the general path
        if (ids ~= nil and ids[record.id]) or string.find(blob, packed_id, start, true) then
            return false
        end
        if ids ~= nil then
            ids[record.id] = true
        end
        size = size + #record.id + #record.payload
        -- byte for byte what cmsgpack.pack(id, timestamp, payload) writes, joined once below
        parts[#parts + 1] = packed_id
        parts[#parts + 1] = cmsgpack.pack(record.timestamp)
        parts[#parts + 1] = string_header(#record.payload)
        parts[#parts + 1] = record.payload
    end
    if size > INLINE_MAX_BYTES then
        return false
    end
    meta.written = count
    -- SET, not SETRANGE + APPEND: APPEND leaves the string room to grow (twice its length),
    -- which doubled the memory of a timeline that gets one record per batch
    parts[1] = cmsgpack.pack(format_timeline_meta(meta))
    parts[2] = string.sub(blob, start)
    redis.call('SET', key, table.concat(parts), 'PX', ms)
    return count
end

-- Applies one batch's records (in order) to a timeline container, trims it to
-- capacity, stores it in the fitting encoding and sets its TTL (ms). `head` is the
-- container as begin_timelines found it (nothing has written it since).
-- Returns how many it dropped, and how many records it holds now.
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

    local raw_meta, records = head.meta, {} -- a missing container may carry a fresh meta
    if head.kind == 'inline' then
        raw_meta, records = decode_inline(head.blob)
    end
    local meta = parse_timeline_meta(raw_meta)
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
    if #records > inline_records or inline_size(records) > INLINE_MAX_BYTES then
        write_hash(key, format_timeline_meta(meta), records)
        redis.call('PEXPIRE', key, ms)
    else
        redis.call('SET', key, encode_inline(format_timeline_meta(meta), records), 'PX', ms)
    end
    return dropped, meta.written
end

-- Commands ---------------------------------------------------------------------

-- ds_add, in four steps: parse_add checks the whole call, begin_timelines reads the
-- state of every timeline the batch touches and apply_record runs the state machine
-- record by record (in memory), write_back stores each touched timeline once, and
-- advance_fence moves the fence.

-- Runs `decode` (which walks a packed argument with struct.unpack); a packed argument
-- that ends early or holds too little is refused as one, the guards' own errors pass.
local function unpacked(decode, what)
    local ok, err = pcall(decode)
    if not ok then
        -- pcall hands a guard's error({err = ...}) back as its "ERR ..." string; a struct
        -- error is a plain message ("<script>: bad argument ...")
        if type(err) == 'table' then
            error(err)
        elseif type(err) == 'string' and string.sub(err, 1, 4) == 'ERR ' then
            error({err = err})
        end
        invalid_argument('malformed ' .. what)
    end
end

-- The timelines of an add call (one packed argument): each with its policy (parsed once
-- per distinct policy) and key.
local function parse_timelines(packed, tag, policies)
    local timelines, seen = {}, {}
    unpacked(function()
        local position, size = 1, #packed
        while position <= size do
            local index, name
            index, name, position = struct.unpack(TIMELINE_FORMAT, packed, position)
            local policy = policies[index]
            if policy == nil then
                parse_integer(index, 'policy index', 1, #policies)
            end
            parse_name(name, 'timeline')
            if seen[name] then
                invalid_argument('timeline listed twice: ' .. name)
            end
            seen[name] = true
            local timeline = new_timeline(policy, name, timeline_key(tag, name))
            timelines[#timelines + 1] = timeline
        end
    end, 'timelines')
    return timelines
end

-- The records of an add call (one packed argument), each pointing at its timeline.
-- Per record, the checks run inline and the parse_* helpers only raise the error:
-- this loop is the one part of the library that runs once per record.
local function parse_records(packed, timelines, through_offset)
    local records = {}
    unpacked(function()
        local position, size = 1, #packed
        while position <= size do
            local index, id, timestamp, offset, payload
            index, id, timestamp, offset, payload, position =
                struct.unpack(RECORD_FORMAT, packed, position)
            -- a table lookup: nil unless an integer in 1..#timelines
            local timeline = timelines[index]
            if timeline == nil then
                parse_integer(index, 'timeline index', 1, #timelines)
            end
            if #id == 0 or #id > MAX_NAME_BYTES then
                parse_name(id, 'record id')
            end
            if not (timestamp >= 0 and timestamp < math.huge) then
                parse_time(timestamp, 'record timestamp')
            end
            if not (offset >= 0 and offset <= MAX_OFFSET) or offset ~= math.floor(offset) then
                parse_integer(offset, 'offset', 0, MAX_OFFSET)
            end
            if through_offset ~= nil and offset > through_offset then
                invalid_argument('record offset ' .. format_integer(offset)
                    .. ' is past through_offset ' .. format_integer(through_offset))
            end
            records[#records + 1] = {
                timeline = timeline,
                id = id,
                timestamp = timestamp,
                offset = offset,
                payload = payload,
            }
        end
    end, 'records')
    return records
end

-- The control operations of an add call (one packed argument, in order): each with the
-- number of records before it, so the call applies both in their offset order.
local function parse_controls(packed, record_count, through_offset)
    local controls, previous = {}, 0
    unpacked(function()
        local position, size = 1, #packed
        while position <= size do
            local before, offset, code, timeline, id
            before, offset, code, timeline, id, position =
                struct.unpack(CONTROL_FORMAT, packed, position)
            parse_integer(before, 'records before a control', previous, record_count)
            previous = before
            parse_integer(offset, 'offset', 0, through_offset or MAX_OFFSET)
            local operation = CONTROL_CODES[code]
            if operation == nil then
                invalid_argument('unknown control operation code: ' .. tostring(code))
            end
            parse_name(timeline, 'timeline')
            controls[#controls + 1] = {
                before = before, offset = offset, operation = operation, timeline = timeline,
                id = operation == 'cancel' and parse_name(id, 'record id') or nil,
            }
        end
    end, 'controls')
    return controls
end

-- The leading edge's nonce ("" = not asked): 24 lowercase hex characters, to which the
-- add appends each opened digest's number (8 hex) to make its 32-character id.
local function parse_open_nonce(value)
    if value == nil or value == '' then
        return nil
    end
    if #value ~= 24 or not string.match(value, '^[0-9a-f]+$') then
        invalid_argument('open nonce must be 24 lowercase hex characters')
    end
    return value
end

-- Step 1: the whole call, checked before the first write: a refused batch must leave
-- no trace (Redis functions are not rolled back on error).
local function parse_add(keys, args)
    local tag = tag_of(keys[1])
    expect_key(keys, 1, fence_key(tag))
    expect_key(keys, 2, waiting_key(tag))
    expect_key(keys, 3, ready_key(tag))
    local call = {
        tag = tag,
        now = parse_time(args[1], 'now'),
        partition_ttl = parse_ttl(args[2]),
        inline_records = parse_integer(args[3], 'inline record limit', 0, INLINE_MAX_RECORDS),
    }
    if args[4] ~= '' then
        call.expected_fence = parse_integer(args[4], 'expected fence', 0, MAX_OFFSET)
    end
    if args[5] ~= '' then
        call.through_offset = parse_integer(args[5], 'through offset', 0, MAX_OFFSET)
    end
    call.topic = parse_topic_id(args[6])
    call.open_nonce = parse_open_nonce(args[7])
    local policy_count = parse_integer(args[8], 'policy count', 0, #args)
    local packed = 9 + policy_count * POLICY_WIDTH -- the packed timelines; then the records
    -- the controls argument, when sent, holds at least one (a plain add sends none)
    if #args ~= packed + 1 and (#args ~= packed + 2 or args[packed + 2] == '') then
        invalid_argument('add expects ' .. POLICY_WIDTH .. ' fields per policy, then the'
            .. ' packed timelines, the packed records and (optional) the packed controls')
    end
    local policies = {}
    for i = 1, policy_count do
        policies[i] = parse_policy(args, 9 + (i - 1) * POLICY_WIDTH)
        -- its containers' TTL as the text Redis reads: a number argument of redis.call is
        -- formatted (%.17g) on every call
        policies[i].ttl_ms_text = format_integer(ttl_ms(policies[i].ttl))
    end
    local timelines = parse_timelines(args[packed], tag, policies)
    call.records = parse_records(args[packed + 1], timelines, call.through_offset)
    if args[packed + 2] ~= nil then
        call.controls = parse_controls(args[packed + 2], #call.records, call.through_offset)
    end
    return call
end

-- Replies of a command that answers one value per item (ZMSCORE, MGET), the items
-- UNPACK_CHUNK at a time after `key` (nil: no key before them), in one list.
local function call_listed(command, key, items)
    local replies = {}
    for first = 1, #items, UNPACK_CHUNK do
        local last = math.min(first + UNPACK_CHUNK - 1, #items)
        local reply
        if key == nil then
            reply = redis.call(command, unpack(items, first, last))
        else
            reply = redis.call(command, key, unpack(items, first, last))
        end
        for i = 1, #reply do
            replies[#replies + 1] = reply[i]
        end
    end
    return replies
end

-- Step 2a, for the timelines the batch touches: each one's state (READY, WAITING with a
-- due time, or absent) and its container's head, read once for the whole batch. Nothing
-- is written before write_back, so the reads are made together, one command per kind of
-- read for all the timelines (ZMSCORE, MGET) instead of several per timeline: with one
-- record per timeline, those calls were most of the Lua's time.
local function begin_timelines(tag, touched)
    if #touched == 0 then
        return
    end
    local names, keys = {}, {}
    for i, timeline in ipairs(touched) do
        names[i] = timeline.timeline
        keys[i] = timeline.key
    end
    local ready = call_listed('ZMSCORE', ready_key(tag), names)
    local waiting, waiting_names = {}, {}
    for i, timeline in ipairs(touched) do
        timeline.ready = ready[i] ~= false
        if not timeline.ready then
            -- a READY timeline ignores its due time: only the others are looked up
            waiting[#waiting + 1] = timeline
            waiting_names[#waiting_names + 1] = timeline.timeline
        end
    end
    local due = call_listed('ZMSCORE', waiting_key(tag), waiting_names)
    for i, timeline in ipairs(waiting) do
        timeline.due = due[i] ~= false and tonumber(due[i]) or nil
    end
    -- the one read of each container this batch (write_back writes from it): MGET answers
    -- an inline container with its bytes and a missing key or a hash with nil; when EXISTS
    -- finds any of the nil ones, each of those is read as read_head does
    local blobs, unknown, unknown_keys = call_listed('MGET', nil, keys), {}, {}
    for i, timeline in ipairs(touched) do
        if blobs[i] ~= false then
            local head = {kind = 'inline', blob = blobs[i]}
            head.meta, head.start = inline_head(head.blob)
            timeline.head = head
        else
            timeline.head = {kind = 'none'}
            unknown[#unknown + 1] = timeline
            unknown_keys[#unknown_keys + 1] = timeline.key
        end
    end
    if #unknown_keys > 0 and call_chunked('EXISTS', nil, unknown_keys) > 0 then
        for _, timeline in ipairs(unknown) do
            timeline.head = read_head(timeline.key)
        end
    end
    for _, timeline in ipairs(touched) do
        timeline.batch = {}
        if timeline.head.kind == 'none' and (timeline.ready or timeline.due ~= nil) then
            -- Scheduled, yet no records: either they are in its open digest (these records
            -- wait behind it), or they expired (or were evicted) with any digest. Marked
            -- either way, so the next digest reports a loss instead of hiding it.
            local open_digest = redis.call('EXISTS', digest_key(tag, timeline.timeline)) == 1
            timeline.head.meta = format_timeline_meta({
                written = 0, dropped = 0, expired = not open_digest, behind_open = open_digest,
            })
        end
        if timeline.due ~= nil and not timeline.ready then
            -- kept on the head: store_batch reads the same meta (nothing rewrites head.meta
            -- of a timeline with a due time before then), so it is parsed once
            timeline.head.parsed = parse_timeline_meta(timeline.head.meta)
            timeline.last_delivery = last_delivery_of(tag, timeline.timeline,
                timeline.head.parsed)
        end
    end
end

-- Why a timeline is due, one letter in its meta (names in store/base.py REASONS).
local CAUSES = {immediate = 'i', cooldown = 'c', flush_at = 'f', schedule = 's', flushed = 'x'}

-- Sets the cause in the meta of an existing container, keeping its records.
local function mark_cause(key, cause)
    local head = read_head(key)
    local meta = parse_timeline_meta(head.meta)
    meta.cause = cause
    write_meta(key, head, format_timeline_meta(meta))
end

-- A record of a timeline on a calendar schedule: no leading edge, and a due time the
-- records do not move. The first one (absent -> WAITING) waits for the next fire.
local function schedule_record(timeline)
    if timeline.due ~= nil then
        return
    end
    timeline.due = timeline.policy.next_fire
    timeline.due_changed = true
    if timeline.head.kind == 'none' then
        -- the container is new: its first write carries the cause
        timeline.head.meta = format_timeline_meta({written = 0, dropped = 0,
            cause = CAUSES.schedule})
    else
        timeline.mark = CAUSES.schedule -- written after the records (write_back)
    end
end

-- After a timeline's records are written: a WAITING timeline holding flush_at records is
-- due now (never sooner than FLUSH_AT_FLOOR after its last delivery).
local function apply_flush_at(timeline, now, written)
    if timeline.policy.flush_at == 0 or timeline.ready or timeline.due == nil
            or written < timeline.policy.flush_at then
        return
    end
    local due = now
    if timeline.last_delivery ~= nil then
        due = math.max(now, timeline.last_delivery + FLUSH_AT_FLOOR)
    end
    if due < timeline.due then
        timeline.due = due
        timeline.due_changed = true
        -- increments keep pushing a full timeline's due time out and flush_at pulls it back:
        -- the cause is rewritten only when it changes
        if parse_timeline_meta(timeline.head.meta).cause ~= CAUSES.flush_at then
            timeline.mark = CAUSES.flush_at
        end
    end
end

-- Step 2b, the state machine, one record at a time (as if added one by one):
--   READY   -> READY    delivery is already on its way
--   WAITING -> WAITING  due = min(due + increment, last_delivery + maximum),
--                       or min(due, timestamp) with no last delivery known
--   absent  -> READY    listed in `ready` (immediately ready)
local function apply_record(timeline, record, ready)
    local batch = timeline.batch
    batch[#batch + 1] = record
    if timeline.ready then
        return
    end
    if timeline.policy.next_fire ~= nil then
        schedule_record(timeline)
        return
    end
    if timeline.due == nil then
        timeline.ready = true
        timeline.became_ready = true
        ready[#ready + 1] = timeline.timeline
        return
    end
    local due
    if timeline.last_delivery ~= nil then
        local policy = timeline.policy
        due = math.min(timeline.due + policy.increment, timeline.last_delivery + policy.maximum)
    else
        due = math.min(timeline.due, record.timestamp)
    end
    if due ~= timeline.due then
        timeline.due = due
        timeline.due_changed = true
    end
end

-- Step 3: each touched timeline written once: its records (trimmed to capacity once,
-- after all of them), then its schedule entry. Returns the records dropped and the
-- longest ttl among the timelines (for the partition-level keys).
local function write_back(tag, touched, call)
    local dropped, partition_ttl = 0, call.partition_ttl
    -- nothing below reads the schedule: its entries are written together at the end, one
    -- ZADD per set instead of one per timeline
    local now, became_ready, due_changed = format_float(call.now), {}, {}
    for _, timeline in ipairs(touched) do
        local lost, written = store_batch(tag, timeline.key, timeline.head, timeline.batch,
            timeline.policy.capacity, call.inline_records, timeline.policy.ttl_ms_text)
        dropped = dropped + lost
        apply_flush_at(timeline, call.now, written)
        if timeline.mark ~= nil then
            mark_cause(timeline.key, timeline.mark)
        end
        if timeline.became_ready then
            became_ready[#became_ready + 1] = now
            became_ready[#became_ready + 1] = timeline.timeline
        elseif timeline.due_changed then
            due_changed[#due_changed + 1] = format_float(timeline.due)
            due_changed[#due_changed + 1] = timeline.timeline
        end
        if timeline.policy.ttl > partition_ttl then
            partition_ttl = timeline.policy.ttl
        end
    end
    call_chunked('ZADD', ready_key(tag), became_ready)
    call_chunked('ZADD', waiting_key(tag), due_changed)
    return dropped, partition_ttl
end

-- Step 4: the fence only moves forward, and takes the caller's topic id when it had none
-- (a fence written before topic ids, or reset). Returns the fence after the call.
local function advance_fence(tag, fence_before, topic_before, fence, topic)
    local moved = fence > -1 and (fence_before == nil or fence > fence_before)
    local adopted = topic ~= nil and topic_before == nil and fence_before ~= nil
    if moved or adopted then
        write_fence(tag, moved and fence or fence_before, topic or topic_before)
    end
    return moved and fence or fence_before
end

-- Steps 2 and 3 over call.records[first..last] (no control among them): those at or below
-- `fence` are skipped. Counts into `totals` and lists what became READY in totals.ready;
-- returns the fence after them.
local function add_run(call, first, last, fence, totals)
    local records, applied, touched = call.records, {}, {}
    for i = first, last do
        local record = records[i]
        if record.offset <= fence then
            totals.skipped = totals.skipped + 1 -- a replay: at or below the fence
        else
            fence = record.offset
            applied[#applied + 1] = record
            local timeline = record.timeline
            if not timeline.touched then
                timeline.touched = true
                touched[#touched + 1] = timeline
            end
        end
    end
    totals.added = totals.added + #applied
    begin_timelines(call.tag, touched)
    for _, record in ipairs(applied) do
        apply_record(record.timeline, record, totals.ready)
    end
    local dropped, partition_ttl = write_back(call.tag, touched, call)
    if call.open_nonce ~= nil then
        for _, timeline in ipairs(touched) do
            if timeline.became_ready then
                totals.leading[timeline.timeline] = timeline.policy.ttl
            end
        end
    end
    totals.dropped = totals.dropped + dropped
    if partition_ttl > totals.partition_ttl then
        totals.partition_ttl = partition_ttl
    end
    return fence
end

-- Records of records[first..last] point at a timeline state of their own: a run after a
-- control reads its timelines again (the control changed them in Redis).
local function fresh_timelines(records, first, last)
    local fresh = {}
    for i = first, last do
        local record = records[i]
        local timeline = fresh[record.timeline]
        if timeline == nil then
            local old = record.timeline
            timeline = new_timeline(old.policy, old.timeline, old.key)
            fresh[old] = timeline
        end
        record.timeline = timeline
    end
end

-- KEYS: waiting, ready, fence. ARGV: now, partition_ttl, limit.
-- Returns {{timeline, due, ...}, more}: up to `limit` timelines moved WAITING -> READY
-- (earliest due first), more = 1 when further due ones remain for the next call.
local function schedule(keys, args)
    local tag = partition_tag_of(keys)
    local now = parse_time(args[1], 'now')
    local partition_ttl = parse_ttl(args[2])
    local limit = parse_integer(args[3], 'limit', 1, MAX_SLICE)
    local ready_at = format_float(now)
    local moved, more = move_range(waiting_key(tag), ready_key(tag), ready_at, function()
        return ready_at
    end, limit)
    refresh_partition_ttl(tag, partition_ttl)
    return {moved, more and 1 or 0}
end

-- KEYS: waiting, ready, fence. ARGV: deadline, now, partition_ttl, limit.
-- Returns {{timeline, ready_since, ...}, more}: up to `limit` timelines moved READY ->
-- WAITING (due = ready_since), so the next schedule tick hands them out again; more = 1
-- when further stale ones remain for the next call.
local function maintenance(keys, args)
    local tag = partition_tag_of(keys)
    local deadline = parse_time(args[1], 'deadline')
    parse_time(args[2], 'now')
    local partition_ttl = parse_ttl(args[3])
    local limit = parse_integer(args[4], 'limit', 1, MAX_SLICE)
    local moved, more = move_range(ready_key(tag), waiting_key(tag),
        '(' .. format_float(deadline), function(score) return score end, limit)
    -- A timeline re-announced here is one nobody delivered (delivery down or behind):
    -- its records and open digest must outlive that, so their TTL restarts too.
    local ms = ttl_ms(partition_ttl)
    for i = 1, #moved, 2 do
        extend_ttl(timeline_key(tag, moved[i]), ms)
        extend_ttl(digest_key(tag, moved[i]), ms)
    end
    refresh_partition_ttl(tag, partition_ttl)
    return {moved, more and 1 or 0}
end

local function timeline_keys(keys, args)
    local tag = tag_of(keys[1])
    local timeline = parse_name(args[1], 'timeline')
    expect_key(keys, 1, timeline_key(tag, timeline))
    expect_key(keys, 2, digest_key(tag, timeline))
    expect_key(keys, 3, waiting_key(tag))
    expect_key(keys, 4, ready_key(tag))
    return tag, timeline
end

local function digest_reply(tag, meta, records)
    local flat = {}
    for _, record in ipairs(sort_records(tag, records, true)) do
        table.insert(flat, record.id)
        table.insert(flat, format_float(record.timestamp))
        table.insert(flat, record.payload)
    end
    return {meta.id, format_float(meta.opened_at), meta.dropped, flat, meta.expired and 1 or 0,
        meta.cause or (meta.last_delivery ~= nil and CAUSES.cooldown or CAUSES.immediate)}
end

-- Opens (or reopens) one READY timeline's digest; nil when the timeline is not READY (nothing
-- written). Returns {id, opened_at, dropped, {id, timestamp, payload, ...} newest first,
-- expired, cause}: expired is 1 when the timeline was scheduled but its earlier records had
-- expired; cause is the letter saying why the timeline was due.
local function open_target(tag, timeline, digest_id, now, ttl)
    if redis.call('ZSCORE', ready_key(tag), timeline) == false then
        return nil
    end
    local digest = digest_key(tag, timeline)
    local existing = parse_digest_meta(read_meta(digest))
    if existing ~= nil then
        -- Reopen: the very same digest, whatever was added since stays pending. Its
        -- TTL restarts: a digest nobody manages to close must not expire meanwhile.
        redis.call('PEXPIRE', digest, ttl_ms(ttl))
        return digest_reply(tag, existing, read_container(digest).records)
    end

    local source = timeline_key(tag, timeline)
    local expired = false
    if redis.call('EXISTS', source) == 1 then
        redis.call('RENAME', source, digest)
    else
        -- READY with neither records nor a digest: its data expired (or was evicted).
        expired = true
        redis.call('DEL', digest) -- a meta-less leftover, if any
    end
    local container = read_container(digest)
    local meta = parse_timeline_meta(container.meta)
    local present = #container.records + container.damaged_count
    -- Records the timeline should hold but does not: evicted or removed payloads.
    local missing = math.max(0, meta.written - present) + container.damaged_count
    local digest_meta = {
        id = digest_id,
        opened_at = now,
        dropped = meta.dropped + missing,
        records = #container.records,
        last_delivery = meta.last_delivery,
        -- records that waited behind a digest that is gone: it expired with its records
        expired = expired or meta.expired or meta.behind_open,
        -- why it is due; before causes were recorded: immediate unless delivered before
        cause = meta.cause or (meta.last_delivery ~= nil and CAUSES.cooldown or CAUSES.immediate),
    }
    if container.kind == 'hash' then
        call_chunked('HDEL', digest, container.damaged)
        redis.call('HSET', digest, META, format_digest_meta(digest_meta))
    else
        redis.call('SET', digest, encode_inline(format_digest_meta(digest_meta), container.records))
    end
    redis.call('PEXPIRE', digest, ttl_ms(ttl))
    return digest_reply(tag, digest_meta, container.records)
end

-- KEYS: timeline, digest, waiting, ready. ARGV: timeline, digest_id, now, ttl.
-- Returns open_target's reply; a timeline that is not READY is refused (invalid_state).
local function open(keys, args)
    local tag, timeline = timeline_keys(keys, args)
    local digest_id = parse_digest_id(args[2])
    local now = parse_time(args[3], 'now')
    local ttl = parse_ttl(args[4])
    local reply = open_target(tag, timeline, digest_id, now, ttl)
    if reply == nil then
        invalid_state('timeline is not ready: ' .. timeline)
    end
    return reply
end

-- Fields of one target of ds_open_many: timeline, digest_id, ttl.
local OPEN_WIDTH = 3
-- Fields of one target of ds_close_many: timeline, digest_id, minimum, ttl, next_fire|"",
-- flush_at (0 = off).
local CLOSE_WIDTH = 6

-- The tag of a call on several timelines of one partition (KEYS: waiting, ready), and its
-- targets: ARGV from `first` on, `width` fields each, checked before anything is written.
local function many_targets(keys, args, first, width)
    local tag = tag_of(keys[1])
    expect_key(keys, 1, waiting_key(tag))
    expect_key(keys, 2, ready_key(tag))
    if (#args - first + 1) % width ~= 0 then
        invalid_argument('expects ' .. width .. ' fields per target')
    end
    return tag
end

-- KEYS: waiting, ready. ARGV: now, N x (timeline, digest_id, ttl).
-- ds_open for each target in order (a repeated timeline reopens), in one call. Returns one
-- reply per target: open_target's, or 0 for a timeline that is not READY (not an error: the
-- other targets are still opened).
local function open_many(keys, args)
    local tag = many_targets(keys, args, 2, OPEN_WIDTH)
    local now = parse_time(args[1], 'now')
    local targets = {}
    for base = 2, #args, OPEN_WIDTH do
        targets[#targets + 1] = {
            parse_name(args[base], 'timeline'), parse_digest_id(args[base + 1]),
            parse_ttl(args[base + 2]),
        }
    end
    local replies = {}
    for i, target in ipairs(targets) do
        replies[i] = open_target(tag, target[1], target[2], now, target[3]) or 0
    end
    return replies
end

-- Closes one digest. Returns 1 when that digest was closed, 0 for an unknown or already closed
-- id, and whether the partition keys' TTL needs a refresh (the timeline waits again).
local function close_target(tag, timeline, digest_id, now, minimum, ttl, next_fire, flush_at)
    local digest = digest_key(tag, timeline)
    local meta = parse_digest_meta(read_meta(digest))
    if meta == nil or meta.id ~= digest_id then
        return 0, false
    end
    redis.call('DEL', digest)
    local source = timeline_key(tag, timeline)
    local head = read_head(source)
    if meta.records == 0 and holds_no_records(source, head) then
        -- An empty digest ends the cool-down: retire, the next event is immediate.
        redis.call('DEL', source)
        redis.call('ZREM', ready_key(tag), timeline)
        redis.call('ZREM', waiting_key(tag), timeline)
        return 1, false
    end
    local timeline_meta = parse_timeline_meta(head.meta)
    timeline_meta.last_delivery = now
    timeline_meta.behind_open = false -- that digest is closed: nothing waits behind it
    local due, soon = now + minimum, nil
    if next_fire ~= nil then
        due = next_fire
    end
    -- A flush that came while the digest was open (flush_timeline), or flush_at records that
    -- did (add leaves a READY timeline alone): due right after the floor, not a cool-down later.
    if timeline_meta.cause == CAUSES.flushed then
        soon = CAUSES.flushed
    elseif flush_at > 0 and timeline_meta.written >= flush_at then
        soon = CAUSES.flush_at
    end
    if soon ~= nil and now + FLUSH_AT_FLOOR < due then
        due, timeline_meta.cause = now + FLUSH_AT_FLOOR, soon
    else
        timeline_meta.cause = next_fire ~= nil and CAUSES.schedule or CAUSES.cooldown
    end
    write_meta(source, head, format_timeline_meta(timeline_meta))
    redis.call('PEXPIRE', source, ttl_ms(ttl))
    redis.call('ZREM', ready_key(tag), timeline)
    redis.call('ZADD', waiting_key(tag), format_float(due), timeline)
    return 1, true
end

local function parse_next_fire(value)
    if value ~= nil and value ~= '' then
        return parse_time(value, 'next fire')
    end
    return nil
end

-- KEYS: timeline, digest, waiting, ready.
-- ARGV: timeline, digest_id, now, minimum_delay, ttl, partition_ttl, next_fire|"", flush_at.
-- next_fire: the calendar schedule's next fire time; the timeline waits for it instead of
-- a cool-down. flush_at: 0 = off. Returns 1 when that digest was closed, 0 for an unknown or
-- already closed id.
local function close(keys, args)
    local tag, timeline = timeline_keys(keys, args)
    local digest_id = parse_digest_id(args[2])
    local now = parse_time(args[3], 'now')
    local minimum = parse_time(args[4], 'minimum_delay')
    local ttl = parse_ttl(args[5])
    local partition_ttl = parse_ttl(args[6])
    local next_fire = parse_next_fire(args[7])
    local closed, waits = close_target(tag, timeline, digest_id, now, minimum, ttl, next_fire,
        parse_integer(args[8], 'flush_at', 0, MAX_OFFSET))
    if waits then
        refresh_partition_ttl(tag, math.max(ttl, partition_ttl))
    end
    return closed
end

-- KEYS: waiting, ready. ARGV: now, partition_ttl, N x (timeline, digest_id, minimum_delay,
-- ttl, next_fire|"", flush_at). ds_close for each target in order, in one call; the partition
-- keys' TTL is refreshed once, to the longest that any close asked for. Returns 1/0 per target.
local function close_many(keys, args)
    local tag = many_targets(keys, args, 3, CLOSE_WIDTH)
    local now = parse_time(args[1], 'now')
    local partition_ttl = parse_ttl(args[2])
    local targets = {}
    for base = 3, #args, CLOSE_WIDTH do
        targets[#targets + 1] = {
            parse_name(args[base], 'timeline'), parse_digest_id(args[base + 1]),
            parse_time(args[base + 2], 'minimum_delay'), parse_ttl(args[base + 3]),
            parse_next_fire(args[base + 4]),
            parse_integer(args[base + 5], 'flush_at', 0, MAX_OFFSET),
        }
    end
    local replies, refresh = {}, nil
    for i, target in ipairs(targets) do
        local closed, waits = close_target(tag, target[1], target[2], now, target[3], target[4],
            target[5], target[6])
        replies[i] = closed
        if waits then
            refresh = math.max(refresh or partition_ttl, target[4])
        end
    end
    if refresh ~= nil then
        refresh_partition_ttl(tag, refresh)
    end
    return replies
end

-- KEYS: timeline, digest, waiting, ready. ARGV: timeline.
-- Returns 1 when anything of the timeline existed.
local function delete(keys, args)
    local tag, timeline = timeline_keys(keys, args)
    local removed = redis.call('DEL', timeline_key(tag, timeline), digest_key(tag, timeline))
        + redis.call('ZREM', ready_key(tag), timeline)
        + redis.call('ZREM', waiting_key(tag), timeline)
    if removed > 0 then
        return 1
    end
    return 0
end

-- KEYS: timeline, digest, waiting, ready. ARGV: timeline.
-- Returns {state, due|nil, last_delivery|nil, pending, digest id|nil, open records, dropped,
-- cause|nil}: cause is the letter recorded with its records, else with its open digest.
local function inspect(keys, args)
    local tag, timeline = timeline_keys(keys, args)
    local source = timeline_key(tag, timeline)
    local state, due = 'absent', nil
    local ready_since = redis.call('ZSCORE', ready_key(tag), timeline)
    local waiting_due = redis.call('ZSCORE', waiting_key(tag), timeline)
    if ready_since ~= false then
        state, due = 'ready', ready_since
    elseif waiting_due ~= false then
        state, due = 'waiting', waiting_due
    end
    local meta = parse_timeline_meta(read_meta(source))
    local digest = parse_digest_meta(read_meta(digest_key(tag, timeline)))
    local last_delivery = last_delivery_of(tag, timeline, meta, digest or false)
    if last_delivery ~= nil then
        last_delivery = format_float(last_delivery)
    end
    return {
        state,
        due or false,
        last_delivery or false,
        record_count(source),
        digest and digest.id or false,
        digest and digest.records or 0,
        meta.dropped,
        meta.cause or (digest and digest.cause) or false,
    }
end

-- KEYS: waiting, ready, fence. Returns {waiting, ready, oldest due|nil, fence|nil}.
local function stats(keys, _)
    local tag = partition_tag_of(keys)
    local oldest = redis.call('ZRANGE', waiting_key(tag), 0, 0, 'WITHSCORES')
    local fence = read_fence(tag)
    return {
        redis.call('ZCARD', waiting_key(tag)),
        redis.call('ZCARD', ready_key(tag)),
        oldest[2] or false,
        fence or false,
    }
end

-- Control operations (flush, cancel) -------------------------------------------------

-- Removes pending records of a timeline container (all of them, or the one `id`), keeping
-- its meta (last delivery, marks, cause). Returns how many it removed.
-- A cancel resets what it cancels: when no pending record is left, no digest will report the
-- trims before it (counted as capacity drops when trimmed) or records that vanished, so the
-- meta's counts go with the records (else an empty digest reports them as lost again).
local function cancel_records(key, id)
    local container = read_container(key)
    if container.kind == 'none' then
        return 0
    end
    local meta = parse_timeline_meta(container.meta)
    local kept, removed = {}, {}
    for _, record in ipairs(container.records) do
        if id == nil or record.id == id then
            removed[#removed + 1] = record.id
        else
            kept[#kept + 1] = record
        end
    end
    if #removed == 0 then
        return 0
    end
    local count = #removed
    meta.written = math.max(0, meta.written - count)
    if #kept == 0 then
        meta.written, meta.dropped = 0, 0
        for _, damaged in ipairs(container.damaged) do
            removed[#removed + 1] = damaged
        end
    end
    if container.kind == 'hash' then
        call_chunked('HDEL', key, removed)
        redis.call('HSET', key, META, format_timeline_meta(meta))
    else
        redis.call('SET', key, encode_inline(format_timeline_meta(meta), kept), 'KEEPTTL')
    end
    return count
end

-- A flush: a WAITING timeline with pending records becomes READY now (no floor: someone
-- asked for this digest). Returns 1 when it did. Records pending behind an open digest keep
-- the flush as their cause, and its close honours it (close_target); a READY timeline not
-- opened yet needs nothing: its open takes everything pending. Nothing pending: no-op (an
-- open digest already holds what was asked for).
local function flush_timeline(tag, timeline, now)
    local source = timeline_key(tag, timeline)
    if record_count(source) == 0 then
        return 0
    end
    if redis.call('ZSCORE', waiting_key(tag), timeline) ~= false then
        mark_cause(source, CAUSES.flushed)
        redis.call('ZREM', waiting_key(tag), timeline)
        redis.call('ZADD', ready_key(tag), format_float(now), timeline)
        return 1
    end
    if redis.call('EXISTS', digest_key(tag, timeline)) == 1 then
        mark_cause(source, CAUSES.flushed)
    end
    return 0
end

-- One control operation on a timeline (ds_add applies a batch's controls with it).
-- Returns became ready 1|0 and the records it cancelled.
local function apply_control(tag, operation, timeline, id, now)
    if operation == 'flush' then
        return flush_timeline(tag, timeline, now), 0
    end
    return 0, cancel_records(timeline_key(tag, timeline), id)
end

-- The leading edge (issue 22) ----------------------------------------------------------
-- An add asked to (an open nonce) opens the digest of every timeline it made READY from
-- absent, in the same call: the ingest publishes it at once and closes it once the broker
-- acknowledged it, instead of announcing it for delivery to open. The timeline stays READY
-- with its digest open until that close, so a crash anywhere between is repaired like a
-- delivery's: the take-over re-announces the READY timeline and delivery's reopen returns
-- this very digest. Opened after the whole batch (its controls included), in the order the
-- timelines became READY: a cancel in the same batch still cancels, and records after the
-- first one go into the same digest, as with an open right after the add.
-- Returns the timelines left to announce (READY through a flush) and {timeline, open
-- reply, ...} of the opened ones; their ids are the nonce and a number (8 hex) each.
local function open_leading(call, totals)
    local ready, opened, count = {}, {}, 0
    for _, timeline in ipairs(totals.ready) do
        local ttl = totals.leading[timeline]
        local reply = nil
        if ttl ~= nil then
            totals.leading[timeline] = nil -- once, should it be listed twice
            count = count + 1
            reply = open_target(call.tag, timeline,
                call.open_nonce .. string.format('%08x', count), call.now, ttl)
        end
        if reply == nil then
            ready[#ready + 1] = timeline
        else
            opened[#opened + 1] = timeline
            opened[#opened + 1] = reply
        end
    end
    return ready, opened
end

-- ds_add (the command: after the control operations, which a batch may hold) ----------

-- A batch holding controls, in ONE call (so Redis cannot lose part of it and keep the rest):
-- each run of records as a plain add does it, each control with apply_control, in offset
-- order, each fenced the same way. Returns the fence after the last.
local function add_with_controls(call, fence, totals)
    local records, done = call.records, 0
    for _, control in ipairs(call.controls) do
        if control.before > done then
            if done > 0 then
                fresh_timelines(records, done + 1, control.before)
            end
            fence = add_run(call, done + 1, control.before, fence, totals)
            done = control.before
        end
        if control.offset > fence then
            fence = control.offset
            local became_ready, cancelled = apply_control(call.tag, control.operation,
                control.timeline, control.id, call.now)
            if became_ready == 1 then
                totals.ready[#totals.ready + 1] = control.timeline
            end
            totals.cancelled = totals.cancelled + cancelled
        end
    end
    if #records > done then
        if done > 0 then
            fresh_timelines(records, done + 1, #records)
        end
        fence = add_run(call, done + 1, #records, fence, totals)
    end
    return fence
end

-- KEYS: fence, waiting, ready.
-- ARGV: now, partition_ttl, inline_records, expected_fence|"", through_offset|"",
--       topic_id|"", open_nonce|"", P, P x policy (POLICY_WIDTH), timelines (packed, TIMELINE_FORMAT
--       each), records (packed, RECORD_FORMAT each)[, controls (packed, CONTROL_FORMAT
--       each)].
-- controls: flush | cancel | cancel_all operations among the records, applied at their
-- place (the records before each one first), fenced like records; they count in neither
-- added nor skipped. A batch with controls is one call like any other: all or nothing.
-- expected_fence: the fence the caller left; if the stored one is behind it (or gone),
-- Redis lost writes: nothing is applied and the caller replays from the fence found.
-- through_offset: the batch's last offset; the fence advances to it even for input
-- the caller never handed over (dead letters).
-- topic_id: the id of the topic the records were read from; a fence of another topic
-- (deleted and recreated, renamed, another cluster) does not fence these offsets: nothing
-- is applied and the caller decides (on_state_loss). "" = not known: no check.
-- open_nonce: open the leading edge's digests in this call (open_leading); "" = announce.
-- Returns {ready timelines, added, skipped, dropped, fence_before|nil, fence_after|nil,
-- topic id of the fence found|nil, cancelled, {timeline, open reply, ...} opened}.
local function add(keys, args)
    local call = parse_add(keys, args)
    local tag = call.tag
    local fence_before, topic_before = read_fence(tag)
    if call.topic ~= nil and topic_before ~= nil and topic_before ~= call.topic then
        return {{}, 0, 0, 0, fence_before or false, fence_before or false, topic_before, 0}
    end
    if call.expected_fence ~= nil
            and (fence_before == nil or fence_before < call.expected_fence) then
        return {{}, 0, 0, 0, fence_before or false, fence_before or false, topic_before or false,
            0}
    end
    local totals = {ready = {}, added = 0, skipped = 0, dropped = 0, cancelled = 0,
        partition_ttl = call.partition_ttl, leading = {}}
    local fence
    if call.controls == nil then
        fence = add_run(call, 1, #call.records, fence_before or -1, totals)
    else
        fence = add_with_controls(call, fence_before or -1, totals)
    end
    local fence_after = advance_fence(tag, fence_before, topic_before,
        math.max(fence, call.through_offset or -1), call.topic)
    refresh_partition_ttl(tag, totals.partition_ttl)
    local ready, opened = totals.ready, {}
    if call.open_nonce ~= nil then
        ready, opened = open_leading(call, totals)
    end
    return {ready, totals.added, totals.skipped, totals.dropped, fence_before or false,
        fence_after or false, topic_before or false, totals.cancelled, opened}
end

-- KEYS: fence. Returns {applied offset|nil, topic id|nil}.
local function fence_get(keys, _)
    local tag = tag_of(keys[1])
    expect_key(keys, 1, fence_key(tag))
    local fence, topic = read_fence(tag)
    return {fence or false, topic or false}
end

-- KEYS: fence. ARGV: offset|"", topic_id|"" (both "": the fence is removed). Writes
-- exactly that fence (a reset for a new topic, an admin replay). The fence never expires.
local function fence_set(keys, args)
    local tag = tag_of(keys[1])
    expect_key(keys, 1, fence_key(tag))
    local offset
    if args[1] ~= '' then
        offset = parse_integer(args[1], 'offset', 0, MAX_OFFSET)
    end
    write_fence(tag, offset, parse_topic_id(args[2] or ''))
    return 1
end

local function version(_, _)
    return LIBRARY_VERSION
end

local READ_ONLY = {'no-writes'}

redis.register_function{function_name = 'ds_version', callback = version, flags = READ_ONLY}
redis.register_function{function_name = 'ds_add', callback = add}
redis.register_function{function_name = 'ds_schedule', callback = schedule}
redis.register_function{function_name = 'ds_maintenance', callback = maintenance}
redis.register_function{function_name = 'ds_open', callback = open}
redis.register_function{function_name = 'ds_close', callback = close}
redis.register_function{function_name = 'ds_open_many', callback = open_many}
redis.register_function{function_name = 'ds_close_many', callback = close_many}
redis.register_function{function_name = 'ds_delete', callback = delete}
redis.register_function{function_name = 'ds_inspect', callback = inspect, flags = READ_ONLY}
redis.register_function{function_name = 'ds_stats', callback = stats, flags = READ_ONLY}
redis.register_function{function_name = 'ds_fence_get', callback = fence_get, flags = READ_ONLY}
redis.register_function{function_name = 'ds_fence_set', callback = fence_set}
