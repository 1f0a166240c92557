-- admin.lua: ds_delete, ds_inspect, ds_stats and the fence (ds_fence_get, ds_fence_set).
-- Holds: delete, inspect, stats, fence_get, fence_set.
-- Needs: MAX_OFFSET (written from Python); guards, keys, encoding; last_delivery_of,
--   read_meta, record_count (containers); read_fence, write_fence (helpers); timeline_keys
--   (digests).

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
