-- helpers.lua: ordering records, and the Redis calls every command shares: chunked
-- variadic commands, sorting in a scratch zset, TTLs of the partition keys, the fence,
-- and moving a slice of a schedule set.
-- Holds: UNPACK_CHUNK, bytes_less, older, newer, LUA_SORT_MAX, call_chunked, call_listed,
--   sort_records, extend_ttl, refresh_partition_ttl, read_fence, write_fence, move_range.
-- Needs: invalid_state (guards); fence_key, ready_key, scratch_key, waiting_key (keys);
--   format_float, format_integer, ttl_ms (encoding).

-- Redis caps the number of Lua stack slots unpack() may use (and cmsgpack's pack and unpack:
-- each value one slot); chunk below it. Even, so no chunk splits a field/value or
-- score/member pair (HSET, ZADD).
local UNPACK_CHUNK = 1000

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
