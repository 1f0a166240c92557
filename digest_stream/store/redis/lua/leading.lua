-- leading.lua: the leading edge: an add with an open nonce opens a new timeline's first
-- digest in the same call.
-- Holds: LEADING_NUMBER_FORMAT, leading_id, lead_record, lead, begin_leading, end_leading.
-- Needs: CAUSES, DIGEST_ID_LENGTH, OPEN_NONCE_LENGTH (Python); digest_key (keys);
--   format_count, format_digest_meta (encoding); encode_inline (containers);
--   distinct_records (container_writes); bind_call_functions, redis_call (digests).
--
-- A timeline an add finds with nothing stored gets its first digest in that same add, in
-- the state ds_open leaves (or its batch form, which every reader but the close settles into
-- it first: batches.lua): the digest (id: the nonce and the timeline's number in the call)
-- holds the records, the timeline is READY and has nothing pending. It is an open digest like any
-- other, so one rule holds on every path: the caller publishes it and closes it once the
-- broker acknowledged it (ds_close_many: the close starts the cool-down), and until then
-- whatever comes for the timeline (records, a flush, flush_at) waits behind it. A publish
-- that fails, or a caller that is gone, leaves it open: an announcement (the caller's, a
-- take-over's, maintenance's) makes delivery reopen that very digest, same id.

-- A leading digest's number after its nonce: the rest of its id, zero-padded hex.
local LEADING_NUMBER_FORMAT = '%0' .. (DIGEST_ID_LENGTH - OPEN_NONCE_LENGTH) .. 'x'

-- The id of the digest the leading state `leading` opens for its call's timeline `number`.
local leading_id
do
    -- the number's texts, made once (filled as they come, as COUNT_TEXT), up to 4096: the
    -- number is the timeline's place among the call's timelines
    local TEXT = {}
    function leading_id(leading, number)
        local text = TEXT[number]
        if text == nil then
            text = string.format(LEADING_NUMBER_FORMAT, number)
            if number <= 4096 then
                TEXT[number] = text
            end
        end
        return leading.nonce .. text
    end
end

-- Leads the call's timeline `number` (`name`, under `policy`) in the batch form (batches.lua):
-- its digest is its one record of the call, at `start` in the records argument, in the
-- call's batch (written once for all of them after the state machine: write_batch); the
-- timeline is READY by its index entry, not in the READY set.
local function lead_record(leading, number, name, start, policy)
    local formed = leading.formed + 1
    leading.formed = formed
    local entries = leading.entries
    entries[2 * formed - 1], entries[2 * formed] = name, leading_id(leading, number)
    leading.positions[number] = start
    if policy.ttl > leading.ttl then
        leading.ttl = policy.ttl
    end
    local opened = leading.opened
    opened[#opened + 1] = number
end

-- Gives `timeline` (absent before this add) its leading digest, opened: its id the nonce and
-- the timeline's number in the call (the caller knows it before the reply), the timeline left
-- READY with no records of its own, its number listed in call.leading.opened. A timeline with
-- one record in the call takes the batch form (lead_record): returns 'batch'. One with
-- several records gets the ordinary open digest (its key, byte for byte encode_inline(meta,
-- records), a repeated id keeping its first place and its last value as store_batch does),
-- READY in the set (write_back lists it), and is listed among the batch's ordinary digests:
-- returns 'ordinary'. Returns false (nothing written) when the timeline must be announced
-- instead: its policy's capacity would trim the records (that rare timeline takes the path of
-- an open; one record is never trimmed, a capacity is at least 1).
local function lead(call, timeline)
    local records, leading, name = timeline.batch, call.leading, timeline.timeline
    if #records == 1 then
        lead_record(leading, timeline.number, name, records[1].start, timeline.policy)
        leading.led[name], leading.led_count = true, leading.led_count + 1
        return 'batch'
    end
    records = distinct_records(records)
    local capacity = timeline.policy.capacity
    if capacity > 0 and #records > capacity then
        return false
    end
    redis_call('SET', digest_key(call.tag, name), encode_inline(leading_id(leading,
        timeline.number) .. leading.meta_middle .. format_count(#records) .. leading.meta_end,
        records), 'PX', timeline.policy.ttl_ms_text)
    leading.ordinary[#leading.ordinary + 1] = name
    if timeline.policy.ttl > leading.ttl then
        leading.ttl = timeline.policy.ttl
    end
    leading.opened[#leading.opened + 1] = timeline.number
    leading.led[name], leading.led_count = true, leading.led_count + 1
    return 'ordinary'
end

-- The leading state of an add call (nil: not asked, or a batch holding controls, whose
-- cancels must reach these records: it announces instead).
local function begin_leading(call, timeline_count)
    if call.open_nonce == nil or call.controls ~= nil then
        return nil
    end
    bind_call_functions() -- lead's redis_call
    local template = format_digest_meta({id = '', opened_at = call.now, dropped = 0,
        records = 0, expired = false, cause = CAUSES.immediate})
    local middle, last = string.match(template, '^(|[^|]*|[^|]*|)0(|.*)$')
    return {opened = {}, led = {}, led_count = 0, nonce = call.open_nonce,
        meta_middle = middle, meta_end = last, formed = 0, entries = {}, positions = {},
        ordinary = {}, ttl = 0, timeline_count = timeline_count}
end

-- After write_back: the READY list the add returns leaves out the timelines it led (their
-- digests are open, the caller publishes them), and the numbers of the led ones. (The ones
-- leading_lane.lua led were never listed READY: only lead's are looked for.)
local function end_leading(call, totals)
    local leading = call.leading
    if leading == nil or #leading.opened == 0 then
        return totals.ready, {}
    end
    local opened = leading.opened
    if leading.led_count == 0 then
        return totals.ready, opened
    elseif leading.led_count == #totals.ready then
        -- every timeline made READY was led (each is listed once in either list)
        return {}, opened
    end
    local led, ready = leading.led, {}
    for _, name in ipairs(totals.ready) do
        if not led[name] then
            ready[#ready + 1] = name
        end
    end
    return ready, opened
end
