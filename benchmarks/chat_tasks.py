"""
The real LLM's task suite (bench.py --target smollm2 --suite): seven kinds of request, five each, written for this
project (none taken from a benchmark). As in Spec-Bench, the kinds differ in how much of the answer the model can
copy from its own prompt, which is where prompt-lookup drafts pay: summaries, questions about a given document and
code edits can reuse the prompt's words; a two-turn chat reuses its earlier answer; arithmetic reuses a few numbers
and phrases; translations and short factual answers have almost nothing to copy.

Each conversation is a list of {"role", "content"} messages ending with the user's turn. The multi-turn category's
first answers are written here too, rather than generated, so that every run (and every method) sees the same
history. The file holds only the requests: no system prompt, no chat template, no generation settings and no
reference answers (the benchmark measures speed, not quality); those belong to bench.py.
"""

from textwrap import dedent

TASKS = {  # category -> (what its requests ask, [conversation, ...]); a conversation ends with the user's turn
    # the summary can copy phrases and names of the passage
    "summary": ("summarise a given passage in a few sentences", [
        [{"role": "user", "content":
            "The town of Millbrook opened its new public library on Saturday morning, after two years of building "
            "work. The old library, a single room above the post office, had run out of space long ago, and many "
            "books were kept in boxes in a storage shed. The new building stands next to the park and has two "
            "floors. The ground floor holds the adult collection, a reading room with large windows and six "
            "computers that anyone with a library card can use for free. The upper floor is for children and "
            "teenagers, with a story corner, board games and a quiet study area. The library will be open six "
            "days a week, from nine in the morning until seven in the evening, and closed on Mondays. Volunteers "
            "are still needed to help shelve books and to run the Saturday reading club for young children. "
            "Anyone interested can leave their name at the front desk.\n\n"
            "Summarise the passage above in three sentences."}],
        [{"role": "user", "content":
            "From the first of next month, the corner bakery on Station Road will change its opening hours. "
            "On weekdays it will open at half past six instead of seven, so that people on their way to the "
            "early train can pick up fresh bread and coffee. It will close at four in the afternoon rather than "
            "six, because most of the bread is sold out by then and the bakers start their work in the middle of "
            "the night. On Saturdays the bakery will stay open until two, and it will remain closed on Sundays. "
            "The owners also plan to add a small table by the window, where customers can sit for a few minutes. "
            "Orders for birthday cakes must now be placed at least three days in advance, either in the shop or "
            "by phone. The owners thanked their customers for their patience during the recent oven repairs, "
            "which closed the shop for a week.\n\n"
            "Please summarise this passage in two or three sentences."}],
        [{"role": "user", "content":
            "Last Thursday the fourth-grade classes of Hillside Primary School went on a day trip to a working "
            "farm about an hour away by bus. The children were split into small groups, each led by a teacher "
            "or a parent helper. In the morning they fed the goats, collected eggs from the chicken house and "
            "watched a farmer milk a cow by hand. After lunch, which they ate on blankets next to the orchard, "
            "each group planted a row of potatoes in a field set aside for school visits. The farmer explained "
            "how long the potatoes would take to grow and promised to send photos as the plants came up. On the "
            "way home it started to rain, but everyone was already back on the bus. The teachers said the "
            "children behaved well, and the school hopes to visit again in the autumn to help with the potato "
            "harvest.\n\n"
            "Write a short summary of the passage above, in no more than three sentences."}],
        [{"role": "user", "content":
            "Release notes for version 2.4 of the team's note-taking app. The biggest change in this release is "
            "offline mode: notes can now be created and edited without an internet connection, and they are "
            "synchronised automatically when the device goes back online. If the same note was changed on two "
            "devices, the app keeps both versions and asks the user which one to keep. Search is also faster, "
            "especially for users with more than a thousand notes, because the app now builds its search index "
            "in the background. We fixed a bug that sometimes moved the cursor to the end of a note after "
            "saving, and another that made images in shared notes appear twice. The settings page has been "
            "reorganised into three tabs: account, appearance and sync. Support for the oldest version of the "
            "desktop operating system will end with the next release. As always, please report problems "
            "through the feedback button in the help menu.\n\n"
            "Summarise these release notes in three sentences for a user who does not read them in full."}],
        [{"role": "user", "content":
            "Every second Saturday of the month, volunteers run a free bicycle repair workshop in the car park "
            "behind the community centre. Anyone can bring a bicycle that needs fixing, and the volunteers will "
            "show them how to do the repair themselves rather than doing it for them. The most common jobs are "
            "fixing flat tyres, adjusting brakes and replacing worn chains. The workshop has a set of tools, a "
            "stand that holds bicycles off the ground and a small stock of spare parts, such as inner tubes, "
            "brake pads and cables, which are sold at cost. Bigger repairs, such as a bent wheel or a broken "
            "frame, may need a visit to a bicycle shop, and the volunteers can explain what to ask for. The "
            "workshop runs from ten until one, and people are asked to arrive before half past twelve. New "
            "volunteers do not need to be experts; they learn while helping.\n\n"
            "Summarise the passage above in a few sentences."}],
    ]),
    # the answer can copy a sentence or phrase of the document
    "rag": ("answer a question about a given document", [
        [{"role": "user", "content":
            "Use the document below to answer the question.\n\n"
            "Document: How to patch an inner tube. First remove the wheel from the bicycle and let out any air "
            "that is left in the tyre. Use two tyre levers to lift one side of the tyre over the rim, then pull "
            "out the inner tube. Pump a little air into the tube and listen for the hiss, or hold the tube under "
            "water and look for bubbles, to find the hole. Mark the spot with chalk. Rub the area around the "
            "hole with sandpaper until it looks dull, then spread a thin layer of glue a little wider than the "
            "patch. Wait about five minutes, until the glue is no longer shiny, before pressing the patch on "
            "firmly. Hold it for a minute. Before putting the tube back, run your fingers carefully around the "
            "inside of the tyre to find whatever caused the puncture, such as a thorn or a piece of glass, and "
            "remove it, or the new tube will go flat again.\n\n"
            "Question: How long should you wait after spreading the glue before pressing the patch on?"}],
        [{"role": "user", "content":
            "Read the following notice and answer the question that comes after it.\n\n"
            "Notice to residents of Elm Court. The water supply to the whole building will be turned off on "
            "Wednesday the 14th, from nine in the morning until about three in the afternoon, while the old "
            "pipes in the basement are replaced. Please fill a few bottles or a bucket with water the evening "
            "before if you will be at home during the day. Lifts will keep working as normal, but the laundry "
            "room on the ground floor will be closed until the following morning, so that the new pipes can be "
            "tested. When the water comes back on, it may look slightly brown for a few minutes; let the cold "
            "tap run until it is clear. If you notice a leak in your flat after the work, call the caretaker "
            "on the number printed by the main entrance. We are sorry for the trouble and thank you for your "
            "patience.\n\n"
            "Question: When will the laundry room open again?"}],
        [{"role": "user", "content":
            "Answer the question using only the information in this text.\n\n"
            "Text: The Riverside swimming pool reopens this week after its summer cleaning. From Monday to "
            "Friday the pool opens at seven in the morning and closes at nine in the evening. On Saturdays it "
            "is open from eight until six, and on Sundays from nine until four. The first hour of every weekday "
            "is kept for lane swimming only, with three lanes for slow, medium and fast swimmers. Children "
            "under eight must be accompanied in the water by an adult. Swimming lessons for beginners start on "
            "the first Tuesday of each month and last for six weeks; places can be booked at the reception desk. "
            "Lockers need a coin, which is returned when the locker is opened. Swimming caps are not required, "
            "but long hair must be tied back. The cafe next to the entrance is open whenever the pool is open.\n\n"
            "Question: At what time does the pool open on Sundays, and when does it close?"}],
        [{"role": "user", "content":
            "Here is a recipe. Use it to answer my question.\n\n"
            "Simple vegetable soup, for four people. Peel and chop two onions, three carrots, two potatoes and "
            "two sticks of celery into small pieces. Warm two spoons of oil in a large pot over a medium heat "
            "and cook the onions for about five minutes, stirring now and then, until they are soft but not "
            "brown. Add the carrots, potatoes and celery and cook for another three minutes. Pour in one and a "
            "half litres of vegetable stock, add a bay leaf and bring the soup to the boil. Then turn the heat "
            "down and let it simmer, with the lid on, for twenty-five minutes, until the potatoes are soft. "
            "Take out the bay leaf, season with salt and pepper, and blend half of the soup if you like it "
            "thicker. The soup keeps for three days in the fridge.\n\n"
            "How long should the soup simmer, and how do I know it is ready?"}],
        [{"role": "user", "content":
            "Based on the memo below, answer the question at the end.\n\n"
            "Memo to all staff: the office move. Our team will move from the third floor to the fifth floor of "
            "the same building over the weekend of the 22nd. Please pack the contents of your desk into the "
            "boxes provided by Thursday evening, and label each box with your name and new desk number, which "
            "you can find on the seating plan by the kitchen. Computers, monitors and phones will be moved by "
            "the building's removal team, so do not pack them; just unplug the cables and leave them on the "
            "desk. Plants and personal items that are fragile should be taken home. On Monday morning the new "
            "office will be ready from eight o'clock, and the network team will be on the fifth floor all day "
            "to help anyone whose computer does not connect. The meeting rooms on the fifth floor keep their "
            "old names, so existing bookings stay the same.\n\n"
            "Question: What should staff do with their computers before the move?"}],
    ]),
    # the answer repeats most of the given function, changing a few lines
    "code": ("fix or extend a short Python function and return it whole", [
        [{"role": "user", "content": dedent("""\
            This function should count how often each word appears in a text.
            But "The" and "the" are counted as different words, and so are "bread" and "bread,".

            ```python
            def count_words(text, min_length=1):
                \"\"\"Map each word of at least min_length letters to how often it appears.\"\"\"
                counts = {}
                for word in text.split():
                    if len(word) < min_length:
                        continue
                    if word in counts:
                        counts[word] += 1
                    else:
                        counts[word] = 1
                return counts
            ```

            Please make it ignore case and strip punctuation from the ends of each word.
            Return the whole function.""")}],
        [{"role": "user", "content": dedent("""\
            My function crashes when the list of scores is empty.
            Can you fix it so that it returns None for an empty list? Return the whole function.

            ```python
            def score_report(scores):
                \"\"\"Return the lowest, highest and average score, the average rounded to one place.\"\"\"
                lowest = scores[0]
                highest = scores[0]
                total = 0
                for score in scores:
                    if score < lowest:
                        lowest = score
                    if score > highest:
                        highest = score
                    total += score
                average = total / len(scores)
                return lowest, highest, round(average, 1)
            ```""")}],
        [{"role": "user", "content": dedent("""\
            This function should combine the stock counts of two shops.
            When both shops have the same item, the second count replaces the first instead of being added to it.

            ```python
            def merge_stock(shop_a, shop_b):
                \"\"\"Combine two dicts that map item names to counts, leaving out items with no stock.\"\"\"
                combined = {}
                for item, count in shop_a.items():
                    if count > 0:
                        combined[item] = count
                for item, count in shop_b.items():
                    if count > 0:
                        combined[item] = count
                return combined
            ```

            Fix the bug so that counts of the same item are added together, and return the whole function.""")}],
        [{"role": "user", "content": dedent("""\
            ```python
            def longest_word(sentence):
                \"\"\"Return the longest word in the sentence and its length; the first one wins a tie.\"\"\"
                words = sentence.split()
                longest = ""
                for word in words:
                    word = word.strip(".,!?")
                    if len(word) < len(longest):
                        longest = word
                return longest, len(longest)
            ```

            The function above always returns an empty string and zero.
            Find the bug, fix it and return the whole function.""")}],
        [{"role": "user", "content": dedent("""\
            Here is a function that builds a shopping list:

            ```python
            def format_list(items, title="Shopping list"):
                \"\"\"Turn a list of item names into a numbered shopping list under a title.\"\"\"
                lines = [title, "-" * len(title)]
                number = 1
                for item in items:
                    item = item.strip()
                    if item:
                        lines.append(f"{number}. {item}")
                        number += 1
                return "\\n".join(lines)
            ```

            Extend it so that it takes a dict that maps each item to a quantity instead of a list.
            It should sort the items by name and write each line as "1. apples x 3".
            Return the whole function.""")}],
    ]),
    # the second answer can reuse much of the first answer, which is in the prompt
    "chat": ("a follow-up request on an answer given earlier in the conversation", [
        [{"role": "user", "content": "How can I keep my houseplants alive? I keep forgetting about them."},
         {"role": "assistant", "content":
            "Most houseplants die from too much or too little water, so a simple routine helps a lot. Pick one "
            "day a week, for example Sunday, to check all of your plants. Push a finger into the soil: if the "
            "top two centimetres are dry, water the plant until water runs out of the bottom of the pot, and "
            "empty the saucer afterwards. Keep plants near a window, but out of strong afternoon sun, which can "
            "burn the leaves. In winter they need less water, so check them every ten days instead. Finally, "
            "choose forgiving plants to start with, such as a snake plant or a spider plant, which cope well "
            "when you forget them for a while."},
         {"role": "user", "content": "Make that shorter and turn it into a list of five points."}],
        [{"role": "user", "content": "Write a short, friendly note inviting my neighbours to a garden party on "
                                     "Saturday afternoon."},
         {"role": "assistant", "content":
            "Dear neighbours,\n\n"
            "We would love to invite you to a small garden party at our house this Saturday, from three o'clock "
            "in the afternoon until around seven. There will be tea, cold drinks, sandwiches and cake, and "
            "children are very welcome; there will be games on the lawn. You do not need to bring anything, but "
            "if you would like to bring a dish to share, we will be happy to try it. If it rains, we will move "
            "inside. Please let us know by Thursday if you can come, so we know how much food to prepare.\n\n"
            "We hope to see you there!\n\n"
            "Best wishes,\n"
            "Your neighbours at number 12"},
         {"role": "user", "content": "Now write the same kind of note for a birthday picnic in the park on "
                                     "Sunday at noon."}],
        [{"role": "user", "content": "How should I plan my weekly grocery shopping to spend less money?"},
         {"role": "assistant", "content":
            "Start by checking what you already have in the fridge and cupboards, so you do not buy things "
            "twice. Then plan your meals for the week, choosing a few dishes that share ingredients, such as "
            "rice, beans, onions and seasonal vegetables. Write a shopping list from the meal plan and stick to "
            "it in the shop. Set a fixed amount of money for the week and keep the receipts, so you can see "
            "where the money goes. Buy large packs only of things you use often and that keep well, like pasta "
            "or oats. Finally, cook a little extra on one or two evenings and keep the leftovers for lunch."},
         {"role": "user", "content": "Rewrite this advice for a family of four with two young children."}],
        [{"role": "user", "content": "Can you suggest a simple morning routine for a weekday?"},
         {"role": "assistant", "content":
            "Here is a simple routine that takes about an hour. Wake up at the same time every day, and drink "
            "a glass of water before anything else. Spend ten minutes stretching or walking outside to wake up "
            "your body. Take a shower and get dressed, with clothes you chose the evening before, so you do not "
            "have to decide in the morning. Eat a simple breakfast, such as porridge with fruit or toast with "
            "eggs. Before you leave, take five minutes to look at your plans for the day and write down the "
            "three most important tasks. Try to avoid checking messages until you have finished breakfast."},
         {"role": "user", "content": "Now adapt that routine for someone who has to leave the house at "
                                     "half past six in the morning and has only forty minutes."}],
        [{"role": "user", "content": "Help me write a short poster for my lost cat. She is small and black with "
                                     "a white patch on her chest, and her name is Pepper."},
         {"role": "assistant", "content":
            "LOST CAT: PLEASE HELP\n\n"
            "Our cat Pepper has been missing since Tuesday evening. She is small and black, with a white patch "
            "on her chest, and she was last seen near the corner of Oak Lane and the school. Pepper is friendly "
            "but shy with strangers, so she may hide in gardens, sheds or garages. Please check your shed and "
            "garage if you live nearby. If you see her, do not chase her; call us instead, at any time of day "
            "or night, on the number below. A small reward is offered for her safe return.\n\n"
            "Thank you for your help!"},
         {"role": "user", "content": "Change the poster for a lost dog instead: a large brown dog called "
                                     "Biscuit who wears a red collar."}],
    ]),
    # the working can copy the problem's numbers and phrases, but most of it is new
    "math": ("solve a short word problem step by step", [
        [{"role": "user", "content":
            "A gardener plants 4 rows of tulips with 12 tulips in each row, and 3 rows of daffodils with 9 "
            "daffodils in each row. Later, 15 of the flowers do not grow. How many flowers grow in the garden? "
            "Solve it step by step."}],
        [{"role": "user", "content":
            "A school takes its pupils on a trip in 3 buses, and each bus has 42 seats. There are 112 pupils "
            "and 8 teachers on the trip. How many seats are left empty? Solve the problem step by step."}],
        [{"role": "user", "content":
            "At a bakery, a loaf of bread costs 3 dollars and a muffin costs 2 dollars. A customer buys 4 "
            "loaves and 6 muffins and pays with a 50-dollar note. How much change does the customer get? "
            "Show your working step by step."}],
        [{"role": "user", "content":
            "A cyclist rides 18 kilometres to work and back every weekday, Monday to Friday, and goes for a "
            "35-kilometre ride on Saturday. She rests on Sunday. How many kilometres does she ride in 4 weeks? "
            "Think it through step by step."}],
        [{"role": "user", "content":
            "A small library has 240 books on its shelves. On Monday, a quarter of the books are lent out. On "
            "Tuesday, 30 of those books are returned. How many books are on the shelves at the end of Tuesday? "
            "Work it out step by step."}],
    ]),
    # the French text can copy only names and numbers of the English one
    "translation": ("translate a short English text into French", [
        [{"role": "user", "content":
            "Translate into French: The new library opens on Saturday morning. Children can borrow up to five "
            "books at a time. The reading room is on the first floor, next to the windows."}],
        [{"role": "user", "content":
            "Please translate the following text into French.\n\n"
            "We are going to the market tomorrow to buy fruit and vegetables. If it rains, we will take the "
            "bus instead of walking. Do you want to come with us?"}],
        [{"role": "user", "content":
            "Translate this message into French: Hello, I would like to book a table for four people on Friday "
            "evening at eight o'clock. One of us does not eat meat. Thank you very much."}],
        [{"role": "user", "content":
            "Translate into French: The train to the coast leaves every hour from platform two. The journey "
            "takes about ninety minutes. Tickets are cheaper if you buy them the day before."}],
        [{"role": "user", "content":
            "Can you translate this into French? My brother is learning to play the guitar. He practises every "
            "evening after dinner, and our neighbours say he is getting better. Next month he will play at the "
            "school concert."}],
    ]),
    # a short factual answer has little to copy beyond the question's own words
    "qa": ("answer a short general-knowledge question", [
        [{"role": "user", "content": "Why is the sky blue on a clear day?"}],
        [{"role": "user", "content": "How many days are there in a leap year, and why do we have leap years?"}],
        [{"role": "user", "content": "What do green plants need in order to make their own food?"}],
        [{"role": "user", "content": "Why does the Earth have seasons?"}],
        [{"role": "user", "content": "What is the difference between weather and climate?"}],
    ]),
}
