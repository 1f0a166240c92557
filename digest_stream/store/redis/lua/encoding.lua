-- encoding.lua: numbers as Redis reads them, record fields, and the timeline and digest
-- metas (their text forms, parsed and formatted).
-- Holds: format_float, format_integer, format_count, WRITTEN_WIDTH, format_written,
--   COUNT_NUMBER, COUNT_DIGITS_MAX, count_number, number_of, float_text, ttl_ms,
--   encode_field, decode_field,
--   split_meta, optional_float, mark_suffix, optional_cause, parse_timeline_meta,
--   meta_last_delivery, format_timeline_meta, parse_digest_meta, format_digest_meta.
-- Needs: nothing.

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

-- A timeline meta's first field (written) is at least this many digits, zero-padded: libraries
-- 19 to 32 rewrote an inline string's count in place as records were appended (SETRANGE),
-- which needed a fixed width; a list's count is its elements (containers.lua), and the
-- padding stays, read either way.
local WRITTEN_WIDTH = 3
local WRITTEN_TEXT = {} -- by count, filled as they come (as COUNT_TEXT)

local function format_written(number)
    local text = WRITTEN_TEXT[number]
    if text == nil then
        if number >= 0 and number < 10 ^ WRITTEN_WIDTH and number == math.floor(number)
                and not (number == 0 and 1 / number < 0) then
            text = string.format('%0' .. WRITTEN_WIDTH .. 'd', number)
            WRITTEN_TEXT[number] = text
        else
            text = format_count(number)
        end
    end
    return text
end

-- The number of a count's digits (a meta's written or dropped), by its text: tonumber (C's
-- strtod) costs more than the rest of reading a meta. Texts of up to COUNT_DIGITS_MAX
-- digits are kept (filled as they come, as COUNT_TEXT): at most 11,110 of them.
local COUNT_NUMBER = {}
local COUNT_DIGITS_MAX = 4

local function count_number(digits)
    local number = COUNT_NUMBER[digits]
    if number == nil then
        number = tonumber(digits)
        if #digits <= COUNT_DIGITS_MAX then
            COUNT_NUMBER[digits] = number
        end
    end
    return number
end

-- tonumber(text), kept in `numbers` for the rest of one call: the timelines one close
-- delivered share their last delivery, so an add of each reads the same texts of it and of
-- the due times that follow from it (strtod costs more than the table lookup).
local function number_of(numbers, text)
    local number = numbers[text]
    if number == nil then
        number = tonumber(text)
        if number ~= nil then
            numbers[text] = number
        end
    end
    return number
end

-- format_float(number), kept in `texts` for the rest of one call (as number_of). Not 0 (a
-- key for -0 too, which formats as "-0") nor NaN (no table key).
local function float_text(texts, number)
    if number == 0 or number ~= number then
        return format_float(number)
    end
    local text = texts[number]
    if text == nil then
        text = format_float(number)
        texts[number] = text
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
-- letter saying why the timeline is due (CAUSES, written from Python), when one is
-- recorded. Metas written before causes existed simply end earlier.
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
-- mark_suffix; last_delivery may be empty; written zero-padded to WRITTEN_WIDTH digits,
-- earlier libraries wrote it unpadded, and it is read either way).
-- written counts the records the container should hold, so records that
-- vanished (evicted, deleted by hand) are detected and reported as dropped; an inline
-- container's written also counts the entries an overwrite superseded (containers.lua)
-- until the next rewrite drops them.
local function parse_timeline_meta(raw)
    if raw == nil then
        return {written = 0, dropped = 0, expired = false, behind_open = false}
    end
    -- the metas the library writes, read with two matches: counts, last delivery, then
    -- nothing, or a mark and a cause (split_meta, with a table per field, only for others)
    local written, dropped, last_delivery, tail = string.match(raw, '^(%d+)|(%d+)|([^|]*)(.*)$')
    local mark, cause = '', nil
    if written ~= nil and tail ~= '' then
        mark, cause = string.match(tail, '^|([^|]*)|?([^|]*)$')
    end
    if written ~= nil and mark ~= nil then
        return {
            written = count_number(written), dropped = count_number(dropped),
            last_delivery = tonumber(last_delivery), expired = mark == '1',
            behind_open = mark == 'o', cause = optional_cause(cause),
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

-- A timeline meta's last delivery as parse_timeline_meta reads it, without reading the rest
-- (an add needs only this of a WAITING timeline's meta, which an append does not rewrite).
-- `numbers`: the numbers of texts read before in this call (number_of).
local function meta_last_delivery(raw, numbers)
    if raw == nil then
        return nil
    end
    local text = string.match(raw, '^%d+|%d+|([^|]*)')
    if text == nil then
        return parse_timeline_meta(raw).last_delivery
    end
    return number_of(numbers, text)
end

local function format_timeline_meta(meta)
    return format_written(meta.written) .. '|' .. format_count(meta.dropped) .. '|'
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
