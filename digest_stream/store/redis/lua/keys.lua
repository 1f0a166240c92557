-- keys.lua: key names (their suffixes and each command's KEYS come from store/redis/protocol.py,
-- as KEY_SUFFIXES and KEY_LAYOUTS); the guards refuse KEYS these would not build.
--
-- All keys of one input partition share the hash tag "{<namespace>:<p>}", so each call
-- touches a single cluster slot. Callers pass the partition-level keys they know in KEYS
-- (for routing and declaration); per-timeline key names are derived from the tag here.
--
-- Layout per partition tag T (suffixes as KEY_SUFFIXES holds them today):
--   T:w        zset    timeline -> due time             (WAITING)
--   T:r        zset    timeline -> time it became READY (READY)
--   T:o        string  the fence: "<offset>|<topic id>", the last applied Kafka
--                      offset and the id of the topic incarnation it belongs to;
--                      either part may be empty ("19": written before topic ids,
--                      "|<id>": reset for a new topic, nothing applied yet)
--   T:t:<tl>   record container: the timeline's pending records and its meta
--   T:d:<tl>   record container: the open digest's records and its meta
--   T:s        zset    scratch: exists only inside one call (sort_records)
--   T:l        hash    written by library 18 only (its leading digests in flight): read
--                      once to be migrated, then deleted (upgrades.lua)
--   T:m        string  the last ds_schedule call's nonce and reply, kept SCHEDULE_REPLY_TTL
--                      for a re-send of that call (ds_schedule)
--   T:i, T:j, T:g, T:b, T:n:<nonce>, T:x:<nonce>: the leading edge's batch form
--                      (batches.lua)
--
-- Holds: tag_of, waiting_key, scratch_key, ready_key, fence_key, moved_key, timeline_key,
--   digest_key, expect_key, key_of, call_tag.
-- Needs: KEY_LAYOUTS, KEY_SUFFIXES (Python); invalid_argument (guards).

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

-- Each key is its tag and its suffix (a timeline's: and its name), the separators made once
-- (in a block: the library's top level is near Lua's 200 locals).
local waiting_key, scratch_key, ready_key, fence_key, moved_key, timeline_key, digest_key
do
    local WAITING_SUFFIX = ':' .. KEY_SUFFIXES.waiting
    local READY_SUFFIX = ':' .. KEY_SUFFIXES.ready
    local FENCE_SUFFIX = ':' .. KEY_SUFFIXES.fence
    local SCRATCH_SUFFIX = ':' .. KEY_SUFFIXES.scratch
    local MOVED_SUFFIX = ':' .. KEY_SUFFIXES.moved
    local TIMELINE_INFIX = ':' .. KEY_SUFFIXES.timeline .. ':'
    local DIGEST_INFIX = ':' .. KEY_SUFFIXES.digest .. ':'

    function waiting_key(tag) return tag .. WAITING_SUFFIX end
    -- A sorted set that exists only inside one call (sort_records): never left behind.
    function scratch_key(tag) return tag .. SCRATCH_SUFFIX end
    function ready_key(tag) return tag .. READY_SUFFIX end
    function fence_key(tag) return tag .. FENCE_SUFFIX end
    -- Partition-level like the fence, but a call's own memory, not declared in KEYS (as
    -- scratch).
    function moved_key(tag) return tag .. MOVED_SUFFIX end
    function timeline_key(tag, timeline) return tag .. TIMELINE_INFIX .. timeline end
    function digest_key(tag, timeline) return tag .. DIGEST_INFIX .. timeline end
end

local function expect_key(keys, index, expected)
    if keys[index] ~= expected then
        invalid_argument('KEYS[' .. index .. '] must be ' .. expected .. ', got ' .. tostring(keys[index]))
    end
end

-- The key of a kind KEY_LAYOUTS names (a KEY_SUFFIXES name), for the tag and timeline.
local function key_of(kind, tag, timeline)
    if kind == 'timeline' then
        return timeline_key(tag, timeline)
    elseif kind == 'digest' then
        return digest_key(tag, timeline)
    end
    return tag .. ':' .. KEY_SUFFIXES[kind]
end

-- The tag of a call whose KEYS follow KEY_LAYOUTS[layout], each key checked (`timeline`: the
-- timeline a timeline-level call names).
local function call_tag(keys, layout, timeline)
    local tag = tag_of(keys[1])
    for index, kind in ipairs(KEY_LAYOUTS[layout]) do
        expect_key(keys, index, key_of(kind, tag, timeline))
    end
    return tag
end
