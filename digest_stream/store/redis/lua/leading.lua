-- leading.lua: the leading edge: an add with an open nonce opens a new timeline's first
-- digest in the same call.
-- Holds: leading_records, lead, begin_leading, end_leading.
-- Needs: CAUSES, DIGEST_ID_LENGTH, OPEN_NONCE_LENGTH (Python); digest_key (keys);
--   format_digest_meta, format_integer (encoding); encode_inline (containers);
--   distinct_records (container_writes).
--
-- A timeline an add finds with nothing stored gets its first digest in that same add, in
-- exactly the state ds_open leaves: the digest (id: the nonce and its number) holds the
-- records, the timeline is READY and has nothing pending. It is an open digest like any
-- other, so one rule holds on every path: the caller publishes it and closes it once the
-- broker acknowledged it (ds_close_many: the close starts the cool-down), and until then
-- whatever comes for the timeline (records, a flush, flush_at) waits behind it. A publish
-- that fails, or a caller that is gone, leaves it open: an announcement (the caller's, a
-- take-over's, maintenance's) makes delivery reopen that very digest, same id.

-- A leading digest's number after its nonce: the rest of its id, zero-padded hex.
local LEADING_NUMBER_FORMAT = '%0' .. (DIGEST_ID_LENGTH - OPEN_NONCE_LENGTH) .. 'x'

-- The records of a timeline's first batch as its digest holds them (a repeated id keeps
-- its first place and its last value, as store_batch does), or nil when the policy's
-- capacity would trim them: that rare timeline takes the path of an open instead.
local function leading_records(timeline)
    local records = distinct_records(timeline.batch)
    local capacity = timeline.policy.capacity
    if capacity > 0 and #records > capacity then
        return nil
    end
    return records
end

-- Gives `timeline` (absent before this add) its leading digest, opened: the digest
-- written under its id, the timeline left READY (write_back lists it) with no records of
-- its own, its open reply listed in call.leading. Returns false (nothing written) when the
-- timeline must be announced instead.
local function lead(call, timeline)
    local records = leading_records(timeline)
    if records == nil then
        return false
    end
    local leading, policy, name = call.leading, timeline.policy, timeline.timeline
    leading.count = leading.count + 1
    local id = call.open_nonce .. string.format(LEADING_NUMBER_FORMAT, leading.count)
    -- the digest meta format_digest_meta would write: only the id and count vary
    local meta = id .. leading.meta_middle .. format_integer(#records) .. leading.meta_end
    redis.call('SET', digest_key(call.tag, name), encode_inline(meta, records),
        'PX', policy.ttl_ms_text)
    leading.names[name] = true
    -- the caller holds these records: it is told the name and id, not sent them back
    local opened = leading.opened
    opened[#opened + 1] = name
    opened[#opened + 1] = id
    return true
end

-- The leading state of an add call (nil: not asked, or a batch holding controls, whose
-- cancels must reach these records: it announces instead).
local function begin_leading(call)
    if call.open_nonce == nil or call.controls ~= nil then
        return nil
    end
    local template = format_digest_meta({id = '', opened_at = call.now, dropped = 0,
        records = 0, expired = false, cause = CAUSES.immediate})
    local middle, last = string.match(template, '^(|[^|]*|[^|]*|)0(|.*)$')
    return {count = 0, opened = {}, names = {}, meta_middle = middle, meta_end = last}
end

-- After write_back: the READY list the add returns leaves out the timelines it led (their
-- digests are open, the caller publishes them), and the led ones' open replies.
local function end_leading(call, totals)
    local leading = call.leading
    if leading == nil or leading.count == 0 then
        return totals.ready, {}
    end
    local ready = {}
    for _, name in ipairs(totals.ready) do
        if not leading.names[name] then
            ready[#ready + 1] = name
        end
    end
    return ready, leading.opened
end
