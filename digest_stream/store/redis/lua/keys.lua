-- keys.lua: key names, mirrored in store/redis/keys.py; the guards refuse KEYS these would not build.
--
-- All keys of one input partition share the hash tag "{<namespace>:<p>}", so each call
-- touches a single cluster slot. Callers pass the partition-level keys they know in KEYS
-- (for routing and declaration); per-timeline key names are derived from the tag here.
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
-- Holds: tag_of, waiting_key, scratch_key, ready_key, fence_key, timeline_key, digest_key,
--   expect_key, partition_tag_of.
-- Needs: invalid_argument (guards).

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

-- The tag of a partition-level call, whose KEYS are waiting, ready and fence (ds_add has
-- its own order).
local function partition_tag_of(keys)
    local tag = tag_of(keys[1])
    expect_key(keys, 1, waiting_key(tag))
    expect_key(keys, 2, ready_key(tag))
    expect_key(keys, 3, fence_key(tag))
    return tag
end
